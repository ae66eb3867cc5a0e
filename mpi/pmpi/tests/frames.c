/* The agent's framing of node reports (huddle_pmpi.c: frame_file), outside MPI: frames each
 * file named on the command line onto stderr, as a rank hands its node's report over through
 * the launcher's stderr (docs/cluster.md). frames.sh feeds the lines to `huddle relay`, the
 * reader on the launch side, and compares what it rebuilds. Usage: frames TOKEN FILE... */
#include "../huddle_pmpi.c"

int main(int argc, char **argv)
{
    if (argc < 2 || !token_ok(argv[1])) {
        fprintf(stderr, "usage: frames TOKEN(hex) FILE...\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *base = strrchr(argv[i], '/');
        char name[300];
        snprintf(name, sizeof name, "node-frames/%s", base ? base + 1 : argv[i]);
        if (!frame_file(argv[1], name, argv[i], now_ns() + 1000000000ull)) {
            fprintf(stderr, "frames: %s: not sent\n", argv[i]);
            return 1;
        }
    }
    return 0;
}
