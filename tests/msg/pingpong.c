/* MPI ping-pong between ranks 0 and 1, 0 B to 4 MiB, every byte checked. Plain MPI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        fprintf(stderr, "pingpong needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int max = 4 << 20;
    unsigned char *buf = malloc(max);
    int errors = 0;
    for (int len = 0; len <= max; len = len ? len * 4 : 1) {
        for (int iter = 0; iter < 3; iter++) {
            if (rank == 0) {
                for (int i = 0; i < len; i++) buf[i] = (unsigned char)(i * 7 + len + iter);
                MPI_Send(buf, len, MPI_BYTE, 1, iter, MPI_COMM_WORLD);
                MPI_Status st;
                MPI_Recv(buf, len, MPI_BYTE, 1, iter, MPI_COMM_WORLD, &st);
                int count;
                MPI_Get_count(&st, MPI_BYTE, &count);
                if (count != len || st.MPI_SOURCE != 1 || st.MPI_TAG != iter) errors++;
                for (int i = 0; i < len; i++)
                    if (buf[i] != (unsigned char)(i * 7 + len + iter + 1)) { errors++; break; }
            } else if (rank == 1) {
                MPI_Recv(buf, len, MPI_BYTE, 0, iter, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int i = 0; i < len; i++) buf[i]++;
                MPI_Send(buf, len, MPI_BYTE, 0, iter, MPI_COMM_WORLD);
            }
        }
    }
    free(buf);
    if (rank == 0) printf("pingpong %s\n", errors ? "FAILED" : "ok");
    MPI_Finalize();
    return errors != 0;
}
