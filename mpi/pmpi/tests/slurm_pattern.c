/* HUDDLE_NODE_REPORT's Slurm patterns (huddle_pmpi.c: expand_slurm_pattern), outside MPI:
 * %j and %s from SLURM_JOB_ID and SLURM_STEP_ID, %% as %, and the refusals. Exit 0: all
 * cases as expected; each wrong case is printed. */
#include "../huddle_pmpi.c"

static int check(const char *in, const char *want, const char *want_why)
{
    char out[64];
    const char *why = NULL;
    int rc = expand_slurm_pattern(in, out, sizeof out, &why);
    if (want && (rc != 0 || strcmp(out, want) != 0)) {
        printf("'%s': got rc %d '%s' (%s), want '%s'\n", in, rc, rc ? "" : out, why ? why : "", want);
        return 1;
    }
    if (!want && (rc == 0 || !why || !strstr(why, want_why))) {
        printf("'%s': got rc %d '%s', want refused with '%s'\n", in, rc, rc ? why : out, want_why);
        return 1;
    }
    return 0;
}

int main(void)
{
    int bad = 0;
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    bad += check("/shared/rep", "/shared/rep", NULL);
    bad += check("/a/%d/100%", "/a/%d/100%", NULL); /* no pattern of ours: as it is */
    bad += check("/a/%%s", "/a/%s", NULL);
    bad += check("/a/step-%s", NULL, "SLURM_STEP_ID is not set");
    bad += check("/a/job-%j", NULL, "SLURM_JOB_ID is not set");
    setenv("SLURM_JOB_ID", "4127", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    bad += check("/a/job-%j/step-%s", "/a/job-4127/step-0", NULL);
    bad += check("%j.%s%%%j", "4127.0%4127", NULL);
    bad += check("/a/very/long/directory/name/that/does/not/fit/in/sixty-four/%j", NULL, "too long");
    return bad != 0;
}
