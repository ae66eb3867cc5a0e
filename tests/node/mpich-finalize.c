/* Linked into tests/node/pairs.c for MPICH only (tests/node-mpich.sh, tests/node-slurm.sh
 * mpich): Debian's MPICH 4.0.2 (ch4:ucx) with UCX 1.13 hangs in MPI_Finalize whenever ranks
 * reach each other over UCX's TCP transport, as those of two hosts do (docs/cluster.md,
 * "MPICH 4.0.2: the hang in MPI_Finalize").
 *
 * Its finalize closes every UCX endpoint with ucp_disconnect_nb (a close in flush mode), waits
 * for all the closes, and only then enters the PMI barrier. UCX's TCP flush of an endpoint that
 * has sent anything is a round trip: a zero-length PUT request that the peer must answer from
 * its own progress. A peer whose closes are done already sits in the PMI barrier (a blocking
 * read on its PMI socket) and never answers, so the flushing rank spins forever. MPICH 4.2
 * moved the barrier before the closes.
 *
 * Here the program's own definition takes the place of UCX's (the executable comes first in
 * the dynamic linker's search): the close is skipped, and ucp_worker_destroy, after the same
 * PMI barrier, releases the endpoints. Nothing is in flight by then: every rank has finished
 * its receives before it reaches MPI_Finalize. Types as in ucp.h (ucs_status_ptr_t and
 * ucp_ep_h are pointers), so that no UCX header is needed; NULL is UCS_OK, "done at once". */
#include <stddef.h>

void *ucp_disconnect_nb(void *ep);

void *ucp_disconnect_nb(void *ep)
{
    (void)ep;
    return NULL;
}
