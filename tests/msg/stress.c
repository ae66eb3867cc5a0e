/* Stress: every rank sends a random sequence of messages (random sizes 0 B..600 KiB, so all
 * three transports, random tags, random destinations) with nonblocking sends; receivers use
 * ANY_SOURCE/ANY_TAG, specific sources with ANY_TAG, specific tags, and Probe+Get_count. The
 * plan comes from a shared seed, so every rank knows every message: each one received must be
 * the next one its source sent us (MPI non-overtaking; every receive here takes the oldest
 * message of its source), with the planned length and tag and every byte as sent. Payloads
 * of 16 B or more also carry (source, sequence, tag, length). Plain MPI. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSGS 300
#define MAXLEN (600 * 1024)
static int rank, size, errors;
#define CHECK(cond, ...) do { if (!(cond)) { if (errors++ < 8) { fprintf(stderr, "stress rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } } while (0)

static uint64_t rng(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }

struct plan { int dst, tag, len; };

static int msg_len(uint64_t r) {
    switch (r % 4) {
    case 0: return (int)((r >> 8) % 64);             /* tiny, eager */
    case 1: return (int)((r >> 8) % 8192);           /* around the eager limit */
    case 2: return (int)((r >> 8) % 120000);         /* pipelined */
    default: return (int)((r >> 8) % MAXLEN);        /* single copy */
    }
}

static void fill(unsigned char *b, int len, int src, int seq) {
    for (int i = 16; i < len; i++) b[i] = (unsigned char)(src * 31 + seq * 7 + i);
}

/* Checks a received message against the plan: it must be the next planned message from
 * st->MPI_SOURCE to us (next[src] is its index in src's plan), `bytes` long. */
static void check_message(unsigned char *b, int bytes, MPI_Status *st, const struct plan *p, int *next) {
    int src = st->MPI_SOURCE;
    if (src < 0 || src >= size) { CHECK(0, "status source %d", src); return; }
    int seq = next[src];
    while (seq < MSGS && p[src * MSGS + seq].dst != rank) seq++;
    if (seq == MSGS) { CHECK(0, "from %d: one message more than planned", src); return; }
    next[src] = seq + 1;
    const struct plan *m = &p[src * MSGS + seq];
    CHECK(bytes == m->len, "from %d seq %d: %d bytes, planned %d", src, seq, bytes, m->len);
    CHECK(st->MPI_TAG == m->tag, "from %d seq %d: tag %d, planned %d", src, seq, st->MPI_TAG, m->tag);
    if (bytes != m->len) return;
    if (m->len < 16) {
        /* Too short to carry a header: bytes that depend on the length and the tag. */
        for (int i = 0; i < m->len; i++)
            if (b[i] != (unsigned char)(m->len * 13 + m->tag * 5 + i)) { CHECK(0, "from %d seq %d (%d B): byte %d", src, seq, m->len, i); break; }
        return;
    }
    int hdr[4];
    memcpy(hdr, b, 16);
    CHECK(hdr[0] == src && hdr[1] == seq && hdr[2] == m->tag && hdr[3] == m->len,
          "from %d seq %d: header says source %d seq %d tag %d length %d (overtaken?)",
          src, seq, hdr[0], hdr[1], hdr[2], hdr[3]);
    for (int i = 16; i < m->len; i++)
        if (b[i] != (unsigned char)(src * 31 + seq * 7 + i)) { CHECK(0, "from %d seq %d: byte %d", src, seq, i); break; }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    for (int round = 0; round < rounds; round++) {
        /* Everyone derives everyone's plan. Lengths >= 16 carry a header. */
        struct plan *p = malloc(sizeof *p * MSGS * size);
        for (int s = 0; s < size; s++) {
            uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(s + 1) * 1000003 ^ (uint64_t)round << 40;
            for (int i = 0; i < MSGS; i++) {
                uint64_t r = rng(&seed);
                p[s * MSGS + i].dst = (int)(r % size);
                p[s * MSGS + i].tag = (int)((r >> 5) % 4);
                int len = msg_len(rng(&seed));
                p[s * MSGS + i].len = len < 16 ? (i % 3 ? 16 : len) : len;
            }
        }
        /* Mode: 0 = all wildcards, 1 = per-source ANY_TAG, 2 = Probe then exact Recv. */
        int mode = round % 3;
        int expect = 0, expect_from[256] = {0};
        for (int s = 0; s < size; s++)
            for (int i = 0; i < MSGS; i++)
                if (p[s * MSGS + i].dst == rank) { expect++; expect_from[s]++; }
        unsigned char **sb = malloc(sizeof *sb * MSGS);
        MPI_Request *rq = malloc(sizeof *rq * MSGS);
        int nsend = 0;
        for (int i = 0; i < MSGS; i++) {
            struct plan *m = &p[rank * MSGS + i];
            sb[i] = malloc(m->len ? m->len : 1);
            if (m->len >= 16) {
                int hdr[4] = {rank, i, m->tag, m->len};
                memcpy(sb[i], hdr, 16);
                fill(sb[i], m->len, rank, i);
            } else {
                for (int k = 0; k < m->len; k++) sb[i][k] = (unsigned char)(m->len * 13 + m->tag * 5 + k);
            }
            MPI_Isend(sb[i], m->len, MPI_BYTE, m->dst, m->tag, MPI_COMM_WORLD, &rq[nsend++]);
        }
        unsigned char *rb = malloc(MAXLEN);
        int next[256] = {0};
        for (int k = 0; k < expect; k++) {
            MPI_Status st;
            int bytes;
            if (mode == 0) {
                MPI_Recv(rb, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            } else if (mode == 1) {
                int src = 0;
                while (expect_from[src] == 0) src++;
                expect_from[src]--;
                MPI_Recv(rb, MAXLEN, MPI_BYTE, src, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                CHECK(st.MPI_SOURCE == src, "asked for %d, got %d", src, st.MPI_SOURCE);
            } else {
                MPI_Status ps;
                MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ps);
                int count;
                MPI_Get_count(&ps, MPI_BYTE, &count);
                MPI_Recv(rb, count, MPI_BYTE, ps.MPI_SOURCE, ps.MPI_TAG, MPI_COMM_WORLD, &st);
                CHECK(st.MPI_SOURCE == ps.MPI_SOURCE && st.MPI_TAG == ps.MPI_TAG, "probe/recv mismatch");
            }
            MPI_Get_count(&st, MPI_BYTE, &bytes);
            check_message(rb, bytes, &st, p, next);
        }
        /* Every planned message to us arrived (none was left unreceived). */
        for (int s = 0; s < size; s++) {
            int left = 0;
            for (int i = next[s]; i < MSGS; i++) left += p[s * MSGS + i].dst == rank;
            CHECK(left == 0, "%d planned messages from %d never matched", left, s);
        }
        MPI_Waitall(nsend, rq, MPI_STATUSES_IGNORE);
        for (int i = 0; i < MSGS; i++) free(sb[i]);
        free(sb); free(rq); free(rb); free(p);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* Per-tag order with receives posted in reverse tag order before the sends. */
    if (size >= 2) {
        const int per = 20;
        if (rank == 1) {
            int got[4][20];
            MPI_Request r[80];
            for (int t = 3, k = 0; t >= 0; t--)
                for (int i = 0; i < per; i++) MPI_Irecv(&got[t][i], 1, MPI_INT, 0, t, MPI_COMM_WORLD, &r[k++]);
            MPI_Waitall(4 * per, r, MPI_STATUSES_IGNORE);
            for (int t = 0; t < 4; t++)
                for (int i = 0; i < per; i++) CHECK(got[t][i] == t * 1000 + i, "tag %d #%d got %d", t, i, got[t][i]);
        } else if (rank == 0) {
            for (int i = 0; i < per; i++)
                for (int t = 0; t < 4; t++) { int v = t * 1000 + i; MPI_Send(&v, 1, MPI_INT, 1, t, MPI_COMM_WORLD); }
        }
    }
    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("stress %s (%d rounds x %d messages per rank)\n", total ? "FAILED" : "ok", rounds, MSGS);
    MPI_Finalize();
    return total != 0;
}
