! Known traffic for the PMPI agent, from Fortran: the Fortran bindings of Open MPI call the
! C library below the MPI_ names (PMPI_Send), and those of MPICH above them (MPI_Send), so
! the agent must count both. Built three times by mpi/pmpi/build.sh, one per Fortran
! binding: -DBIND_MPIFH (include 'mpif.h'), -DBIND_MPI (use mpi), -DBIND_F08 (use mpi_f08).
! As in real Fortran codes, the buffers are static arrays in a COMMON block.
!
! Every pattern adds what it sends, by plain arithmetic, to an expected matrix (row = sender,
! world ranks, bytes); rank 0 writes it to the file named by the first argument, in the
! format of the agent's rank matrix, for the test to compare.
program traffic
#if defined(BIND_F08)
  use mpi_f08
#elif defined(BIND_MPI)
  use mpi
#endif
  implicit none
#if defined(BIND_MPIFH)
  include 'mpif.h'
#endif
#if defined(BIND_F08)
#define COMM_T type(MPI_Comm)
#define REQUEST_T type(MPI_Request)
#define DATATYPE_T type(MPI_Datatype)
#else
#define COMM_T integer
#define REQUEST_T integer
#define DATATYPE_T integer
#endif
  integer, parameter :: max_ranks = 16
  double precision :: dsend(2048), drecv(2048)
  integer :: iout(400, 0:max_ranks - 1), iin(400, 0:max_ranks - 1), icoll(64 * max_ranks)
  character :: cout(200), cin(200)
  common /bufs/ dsend, drecv, iout, iin, icoll, cout, cin
  integer(8) :: expect(0:max_ranks - 1, 0:max_ranks - 1)
  integer :: n, me, ierr, i, j, partner, root, u
  REQUEST_T :: req(2 * max_ranks)
  COMM_T :: sub
  DATATYPE_T :: triple
  integer :: sub_rank, sub_size
  character(len=4096) :: path

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, me, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  if (command_argument_count() < 1 .or. n > max_ranks) then
    if (me == 0) write (0, '(a,i0,a)') 'usage: traffic EXPECTED.csv (at most ', max_ranks, ' ranks)'
    call MPI_Finalize(ierr)
    stop 2
  end if
  call get_command_argument(1, path)
  expect = 0
  dsend = 1d0
  iout = 1
  icoll = 1

  ! Ring with MPI_Sendrecv: rank r sends 100 * (r + 1) doubles to r + 1.
  do i = 0, n - 1
    expect(i, mod(i + 1, n)) = expect(i, mod(i + 1, n)) + 800_8 * (i + 1)
  end do
  call MPI_Sendrecv(dsend, 100 * (me + 1), MPI_DOUBLE_PRECISION, mod(me + 1, n), 1, &
                    drecv, 100 * n, MPI_DOUBLE_PRECISION, mod(me + n - 1, n), 1, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)

  ! All pairs, nonblocking, MPI_Waitall: i sends (i + 1) * (j + 2) integers to j (j == i too).
  do i = 0, n - 1
    do j = 0, n - 1
      expect(i, j) = expect(i, j) + 4_8 * (i + 1) * (j + 2)
    end do
  end do
  do j = 0, n - 1
    call MPI_Irecv(iin(1, j), (j + 1) * (me + 2), MPI_INTEGER, j, 2, MPI_COMM_WORLD, req(j + 1), ierr)
  end do
  do j = 0, n - 1
    call MPI_Isend(iout(1, j), (me + 1) * (j + 2), MPI_INTEGER, j, 2, MPI_COMM_WORLD, req(n + j + 1), ierr)
  end do
  call MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE, ierr)

  ! Pairs (0,1), (2,3)...: Send and Recv of 2 elements of a derived type of 3 doubles (48
  ! bytes) each way; a send to MPI_PROC_NULL counts nothing.
  call MPI_Type_contiguous(3, MPI_DOUBLE_PRECISION, triple, ierr)
  call MPI_Type_commit(triple, ierr)
  do i = 0, n - 2, 2
    expect(i, i + 1) = expect(i, i + 1) + 48
    expect(i + 1, i) = expect(i + 1, i) + 48
  end do
  if (mod(me, 2) == 0) then
    partner = me + 1
  else
    partner = me - 1
  end if
  if (partner < n) then
    if (mod(me, 2) == 0) then
      call MPI_Send(dsend, 2, triple, partner, 3, MPI_COMM_WORLD, ierr)
      call MPI_Recv(drecv, 2, triple, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    else
      call MPI_Recv(drecv, 2, triple, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
      call MPI_Send(dsend, 2, triple, partner, 3, MPI_COMM_WORLD, ierr)
    end if
  end if
  call MPI_Send(dsend, 9, MPI_DOUBLE_PRECISION, MPI_PROC_NULL, 6, MPI_COMM_WORLD, ierr)
  call MPI_Type_free(triple, ierr)

  ! A sub-communicator whose ranks differ from the world's (split by parity, descending world
  ! rank): each member sends 100 + world rank bytes to the next member.
  do i = 0, n - 1
    call sub_next(i, j)
    if (j /= i) expect(i, j) = expect(i, j) + 100 + i
  end do
  call MPI_Comm_split(MPI_COMM_WORLD, mod(me, 2), -me, sub, ierr)
  call MPI_Comm_rank(sub, sub_rank, ierr)
  call MPI_Comm_size(sub, sub_size, ierr)
  if (sub_size > 1) then
    call MPI_Irecv(cin, 200, MPI_CHARACTER, mod(sub_rank + sub_size - 1, sub_size), 7, sub, req(1), ierr)
    call MPI_Send(cout, 100 + me, MPI_CHARACTER, mod(sub_rank + 1, sub_size), 7, sub, ierr)
    call MPI_Wait(req(1), MPI_STATUS_IGNORE, ierr)
  end if
  call MPI_Comm_free(sub, ierr)

  ! Collectives under the model of docs/pmpi.md, two of them in place.
  root = min(1, n - 1)
  do i = 0, n - 1
    do j = 0, n - 1
      if (i == j) cycle
      if (i == root) expect(i, j) = expect(i, j) + 400   ! Bcast 100 integers from root
      if (j == 0) expect(i, j) = expect(i, j) + 20       ! Reduce 5 integers to 0
      expect(i, j) = expect(i, j) + 80                   ! Allreduce 10 doubles in place
      expect(i, j) = expect(i, j) + 12                   ! Alltoall 3 integers
      expect(i, j) = expect(i, j) + 8                    ! Allgather 2 integers in place
      if (j == root) expect(i, j) = expect(i, j) + 24    ! Gather 6 integers to root
    end do
  end do
  call MPI_Bcast(icoll, 100, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
  call MPI_Reduce(icoll, iin, 5, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(MPI_IN_PLACE, dsend, 10, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Alltoall(icoll, 3, MPI_INTEGER, iin, 3, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, icoll, 2, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call MPI_Gather(icoll, 6, MPI_INTEGER, iin, 6, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)

  if (me == 0) then
    open (newunit=u, file=trim(path), status='replace', action='write', iostat=ierr)
    if (ierr /= 0) then
      write (0, '(2a)') 'traffic: cannot write ', trim(path)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
    do i = 0, n - 1
      write (u, '(*(i0,:,","))') expect(i, 0:n - 1)
    end do
    close (u)
  end if
  call MPI_Finalize(ierr)

contains

  ! The member after world rank w in w's parity sub-communicator (descending world rank, cyclic).
  subroutine sub_next(w, next)
    integer, intent(in) :: w
    integer, intent(out) :: next
    next = w - 2
    if (next < 0) then
      next = n - 1
      if (mod(next, 2) /= mod(w, 2)) next = n - 2
    end if
  end subroutine sub_next
end program traffic
