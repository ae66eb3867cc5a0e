! layout-f: the Fortran twin of layout.c (see README.md beside this file), laid out like a
! legacy Fortran code: the fields live in a named COMMON block sized by PARAMETERs (in .bss),
! the weights in a COMMON initialised by BLOCK DATA (in .data).
!
!   layout-f PATTERN [--seconds S | --iterations K] [--out-dir DIR]
!   PATTERN = halo | stencil | transpose | pipeline; threads from OMP_NUM_THREADS.
!
! The memory layout and the arithmetic (and its order) are those of layout.c: a C row y is a
! Fortran column, so the same bytes are computed and both print the same checksum.

module layout_params
  implicit none
  integer, parameter :: NF = 2**21          ! doubles per field: 16 MiB, 4096 pages
  integer, parameter :: H = 512             ! halo: doubles per cell (one page), the halo width
  integer, parameter :: NCELL = NF / H      ! halo: cells in the 1-D chain
  integer, parameter :: NX = 2048, NY = 1024 ! stencil: NY columns of NX doubles (a column is 4 pages)
  integer, parameter :: NM = 1024           ! transpose: NM x NM complex, stored as (2, NM, NM)
  integer, parameter :: MAXT = 256
  integer, parameter :: IHALO = 1, ISTENCIL = 2, ITRANSPOSE = 3, IPIPELINE = 4  ! pattern numbers
end module layout_params

! gettid, getpid and clock_gettime from glibc.
module layout_sys
  use iso_c_binding
  implicit none
  type, bind(c) :: timespec
    integer(c_long) :: sec, nsec
  end type timespec
  integer(c_int), parameter :: CLOCK_REALTIME = 0, CLOCK_MONOTONIC = 1
  interface
    integer(c_int) function c_gettid() bind(c, name='gettid')
      import :: c_int
    end function c_gettid
    integer(c_int) function c_getpid() bind(c, name='getpid')
      import :: c_int
    end function c_getpid
    integer(c_int) function c_clock_gettime(clk, ts) bind(c, name='clock_gettime')
      import :: c_int, timespec
      integer(c_int), value :: clk
      type(timespec), intent(out) :: ts
    end function c_clock_gettime
  end interface
contains
  integer(c_int64_t) function now_ns(clk)
    integer(c_int), intent(in) :: clk
    type(timespec) :: ts
    integer(c_int) :: rc
    rc = c_clock_gettime(clk, ts)
    now_ns = int(ts%sec, c_int64_t) * 1000000000_c_int64_t + int(ts%nsec, c_int64_t)
  end function now_ns
end module layout_sys

! Raw weights per pattern (a column each), normalised by the master at start. In .data.
block data weights
  implicit none
  double precision coef(6, 4)
  common /coefs/ coef
  data coef / 4d0, 1d0, 1d0, 2d0, 0d0, 0d0, &   ! halo: centre, left cell, right cell, source
              4d0, 1d0, 1d0, 1d0, 1d0, 2d0, &   ! stencil: centre, north, south, west, east, source
              2d0, 1d0, 1d0, 0d0, 0d0, 0d0, &   ! transpose: keep A, B * twiddle, twiddle
              6d0, 1d0, 1d0, 0d0, 0d0, 0d0 /    ! pipeline: linear, cubic, source
end block data weights

program layout
  use layout_params
  use layout_sys
  use omp_lib
  use iso_fortran_env, only: error_unit
  implicit none
  ! The fields: u and v (double buffered), f the source term / twiddles, each thread reading
  ! only its own block of f. Uninitialised COMMON, so .bss.
  double precision u(NF), v(NF), f(NF)
  common /fields/ u, v, f
  double precision coef(6, 4)
  common /coefs/ coef

  character(len=16), parameter :: names(4) = [character(len=16) :: 'halo', 'stencil', 'transpose', 'pipeline']
  character(len=4096) :: arg, val, dir, gt_path, json_path
  integer :: p, nt, a, ios, t, r, k, i, j, unit
  integer :: tids(MAXT)
  integer(8) :: fixed, iters, it, kk, start, start_unix, t_end, cross, digest
  integer(8), allocatable :: gt(:, :)
  double precision :: seconds, wsum, secs
  logical :: finished

  p = 0
  seconds = 3d0
  fixed = 0
  dir = '.'
  call get_command_argument(1, arg)
  do a = 1, 4
    if (arg == names(a)) p = a
  end do
  if (p == 0) call usage()
  a = 2
  do while (a <= command_argument_count())
    if (a + 1 > command_argument_count()) call usage()
    call get_command_argument(a, arg)
    call get_command_argument(a + 1, val)
    ios = 0
    if (arg == '--seconds') then
      read (val, *, iostat=ios) seconds
      if (ios /= 0 .or. .not. seconds > 0d0) call usage()
    else if (arg == '--iterations') then
      read (val, *, iostat=ios) fixed
      if (ios /= 0 .or. fixed < 1) call usage()
    else if (arg == '--out-dir') then
      dir = val
    else
      call usage()
    end if
    a = a + 2
  end do
  nt = omp_get_max_threads()
  if (nt < 1 .or. nt > MAXT) then
    write (error_unit, '(a,i0,a,i0)') 'layout-f: 1 to ', MAXT, ' threads (OMP_NUM_THREADS), not ', nt
    stop 2
  end if

  ! Serial initialisation by the master thread: the weights, then every page of every field.
  do r = 1, 4
    wsum = 0d0
    do k = 1, 6
      wsum = wsum + abs(coef(k, r))
    end do
    do k = 1, 6
      coef(k, r) = coef(k, r) / wsum
    end do
  end do
  do kk = 0, NF - 1
    u(kk + 1) = init_value(kk)
    v(kk + 1) = init_value(kk + NF)
    f(kk + 1) = init_value(kk + 2 * NF)
  end do

  !$omp parallel num_threads(nt) private(t, it)
  t = omp_get_thread_num()
  if (omp_get_num_threads() /= nt) error stop 'layout-f: fewer threads than OMP_NUM_THREADS'
  tids(t + 1) = c_gettid()
  !$omp barrier
  !$omp master
  start = now_ns(CLOCK_MONOTONIC)
  start_unix = now_ns(CLOCK_REALTIME)
  !$omp end master
  !$omp barrier
  it = 0
  do
    call step(t, it)
    !$omp barrier
    ! Thread 0 alone decides whether that was the last iteration, so all do the same count.
    !$omp master
    iters = it + 1
    t_end = now_ns(CLOCK_MONOTONIC)
    if (fixed > 0) then
      finished = iters >= fixed
    else
      finished = dble(t_end - start) >= seconds * 1d9
    end if
    !$omp end master
    !$omp barrier
    if (finished) exit
    it = it + 1
  end do
  !$omp end parallel
  secs = dble(t_end - start) / 1d9

  allocate (gt(nt, nt))
  call ground_truth(gt)
  gt_path = trim(dir) // '/ground-truth.csv'
  open (newunit=unit, file=trim(gt_path), status='replace', action='write', iostat=ios)
  if (ios /= 0) call cannot_write(gt_path)
  cross = 0
  do i = 1, nt
    do j = 1, nt
      if (j < nt) then
        write (unit, '(i0,a)', advance='no') gt(i, j), ','
      else
        write (unit, '(i0)') gt(i, j)
      end if
      if (j > i) cross = cross + gt(i, j)
    end do
  end do
  close (unit)

  digest = checksum()
  json_path = trim(dir) // '/workload.json'
  open (newunit=unit, file=trim(json_path), status='replace', action='write', iostat=ios)
  if (ios /= 0) call cannot_write(json_path)
  write (unit, '(a)') '{', '  "schema": "huddle.workload/1",', &
    '  "pattern": "' // trim(names(p)) // '",', '  "phases": ["' // trim(names(p)) // '"],', &
    '  "mode": "threads",', '  "layout": "static",', '  "tasks": ' // itoa(int(nt, 8)) // ',', &
    '  "pid": ' // itoa(int(c_getpid(), 8)) // ','
  write (unit, '(a)', advance='no') '  "tids": ['
  do t = 1, nt
    if (t > 1) write (unit, '(a)', advance='no') ', '
    write (unit, '(i0)', advance='no') tids(t)
  end do
  write (unit, '(a)') '],', '  "iterations": ' // itoa(iters) // ',', &
    '  "phase_iterations": [' // itoa(iters) // '],', '  "seconds": ' // ftoa(secs, 6) // ',', &
    '  "iterations_per_second_per_task": ' // ftoa(iters / secs, 3) // ',', &
    '  "iterations_per_second_total": ' // ftoa(iters * nt / secs, 3) // ',', &
    '  "read_bytes_per_second": ' // ftoa(cross / secs, 3) // ',', &
    '  "checksum": "' // hex16(digest) // '",', '  "read_errors": 0,', '  "phase_switch_s": null,', &
    '  "start_monotonic_ns": ' // itoa(start) // ',', '  "phase_switch_monotonic_ns": null,', &
    '  "start_unix_ns": ' // itoa(start_unix) // ',', &
    '  "files": ["' // trim(gt_path) // '", "' // trim(json_path) // '"]', '}'
  close (unit)
  write (*, '(a)') 'pattern=' // trim(names(p)) // ' threads=' // itoa(int(nt, 8)) // &
    ' iterations=' // itoa(iters) // ' checksum=' // hex16(digest)

contains

  subroutine usage()
    write (error_unit, '(a)') 'usage: layout-f halo|stencil|transpose|pipeline [--seconds S | --iterations K] [--out-dir DIR]'
    stop 2
  end subroutine usage

  subroutine cannot_write(path)
    character(len=*), intent(in) :: path
    write (error_unit, '(a)') 'layout-f: cannot write ' // trim(path)
    stop 1
  end subroutine cannot_write

  ! Block k (0-based) of n items split over np owners starts at lo(n, k, np) (0-based).
  integer function lo(n, k, np)
    integer, intent(in) :: n, k, np
    lo = int(int(n, 8) * k / np)
  end function lo

  ! Stencil thread grid px x py (px tiles along y): the most square factorisation, px <= py.
  subroutine grid(px, py)
    integer, intent(out) :: px, py
    integer :: d
    px = 1
    d = 1
    do while (d * d <= nt)
      if (mod(nt, d) == 0) px = d
      d = d + 1
    end do
    py = nt / px
  end subroutine grid

  ! Pipeline buffer length: equal for every stage and a whole number of pages.
  integer function pipe_len()
    pipe_len = NF / nt / H * H
  end function pipe_len

  ! Deterministic values in [-0.5, 0.5), as in layout.c: the top 20 bits of a 32-bit
  ! multiplicative hash, scaled by a power of 2 (exact).
  double precision function init_value(k)
    integer(8), intent(in) :: k
    init_value = dble(ishft(iand(k * 2654435761_8, 4294967295_8), -12)) / 2d0**20 - 0.5d0
  end function init_value

  subroutine step(t, it)
    integer, intent(in) :: t
    integer(8), intent(in) :: it
    ! Double buffering: even iterations read u and write v, odd ones the reverse.
    select case (p)
    case (IHALO)
      if (mod(it, 2_8) == 0) then
        call step_halo(t, u, v, f)
      else
        call step_halo(t, v, u, f)
      end if
    case (ISTENCIL)
      if (mod(it, 2_8) == 0) then
        call step_stencil(t, u, v, f)
      else
        call step_stencil(t, v, u, f)
      end if
    case (ITRANSPOSE)
      call step_transpose(t, u, v, f)
    case (IPIPELINE)
      if (mod(it, 2_8) == 0) then
        call step_pipeline(t, u, v, f)
      else
        call step_pipeline(t, v, u, f)
      end if
    end select
  end subroutine step

  ! (a) halo: 3-point stencil over a chain of cells of H doubles (a column each), reflective at
  ! the ends. The first and last cell of a block read a whole cell of the neighbour's block.
  subroutine step_halo(t, src, dst, s)
    integer, intent(in) :: t
    double precision, intent(in) :: src(H, NCELL), s(H, NCELL)
    double precision, intent(inout) :: dst(H, NCELL)   ! only my block is written
    integer :: c, l, r, k
    do c = lo(NCELL, t, nt) + 1, lo(NCELL, t + 1, nt)
      l = max(c - 1, 1)
      r = min(c + 1, NCELL)
      do k = 1, H
        dst(k, c) = ((coef(1, IHALO) * src(k, c) + coef(2, IHALO) * src(k, l)) &
                     + coef(3, IHALO) * src(k, r)) + coef(4, IHALO) * s(k, c)
      end do
    end do
  end subroutine step_halo

  ! (b) stencil: 5-point on (NX, NY), column-major: x (first index) is contiguous, so the inner
  ! loop runs over x. Tile (ty, tx) of the px x py grid; reflective at the grid's edges. Reads
  ! one column segment of the tiles before/after in y and one row of those before/after in x.
  subroutine step_stencil(t, src, dst, s)
    integer, intent(in) :: t
    double precision, intent(in) :: src(NX, NY), s(NX, NY)
    double precision, intent(inout) :: dst(NX, NY)     ! only my tile is written
    integer :: px, py, x, y, yn, ys
    double precision :: we, ea
    call grid(px, py)
    do y = lo(NY, t / py, px) + 1, lo(NY, t / py + 1, px)
      yn = max(y - 1, 1)
      ys = min(y + 1, NY)
      do x = lo(NX, mod(t, py), py) + 1, lo(NX, mod(t, py) + 1, py)
        we = src(max(x - 1, 1), y)
        ea = src(min(x + 1, NX), y)
        dst(x, y) = ((((coef(1, ISTENCIL) * src(x, y) + coef(2, ISTENCIL) * src(x, yn)) &
                       + coef(3, ISTENCIL) * src(x, ys)) + coef(4, ISTENCIL) * we) &
                     + coef(5, ISTENCIL) * ea) + coef(6, ISTENCIL) * s(x, y)
      end do
    end do
  end subroutine step_stencil

  ! (c) transpose, as in a 2-D FFT: A = u, B = v, complex (2, NM, NM); thread t owns the slabs
  ! i in [i0, i1) (last index) of both. B = A^T reads a piece of every thread's slabs of A; then
  ! each thread mixes its slabs of A with B * twiddle and the twiddle (own slabs only).
  subroutine step_transpose(t, ga, gb, s)
    integer, intent(in) :: t
    double precision, intent(inout) :: ga(2, NM, NM), gb(2, NM, NM)
    double precision, intent(in) :: s(2, NM, NM)
    integer :: i, j, jb
    double precision :: br, bi, zr, zi
    do jb = 0, NM - 1, 16          ! 16 slabs of A at a time: reuse their cache lines
      do i = lo(NM, t, nt) + 1, lo(NM, t + 1, nt)
        do j = jb + 1, jb + 16
          gb(1, j, i) = ga(1, i, j)
          gb(2, j, i) = ga(2, i, j)
        end do
      end do
    end do
    !$omp barrier
    ! (all of A read before anyone writes it)
    do i = lo(NM, t, nt) + 1, lo(NM, t + 1, nt)
      do j = 1, NM
        br = gb(1, j, i)
        bi = gb(2, j, i)
        zr = s(1, j, i)
        zi = s(2, j, i)
        ga(1, j, i) = (coef(1, ITRANSPOSE) * ga(1, j, i) + coef(2, ITRANSPOSE) * (br * zr - bi * zi)) &
                      + coef(3, ITRANSPOSE) * zr
        ga(2, j, i) = (coef(1, ITRANSPOSE) * ga(2, j, i) + coef(2, ITRANSPOSE) * (br * zi + bi * zr)) &
                      + coef(3, ITRANSPOSE) * zi
      end do
    end do
  end subroutine step_transpose

  ! (d) pipeline: stage t maps the buffer stage t-1 wrote last iteration into its own buffer
  ! (stage 0 feeds back its own). Buffer t = elements t*L+1 .. (t+1)*L.
  subroutine step_pipeline(t, src, dst, s)
    integer, intent(in) :: t
    double precision, intent(in) :: src(NF), s(NF)
    double precision, intent(inout) :: dst(NF)         ! only my buffer is written
    integer :: l, k, from
    double precision :: x
    l = pipe_len()
    from = max(t - 1, 0) * l
    do k = 1, l
      x = src(from + k)
      dst(t * l + k) = (coef(1, IPIPELINE) * x + coef(2, IPIPELINE) * ((x * x) * x)) &
                       + coef(3, IPIPELINE) * s(t * l + k)
    end do
  end subroutine step_pipeline

  ! gt(i, j) = bytes i read of j's blocks plus bytes j read of i's, over `iters` iterations,
  ! counted in whole 64-byte cache lines (what moves between caches): from the decomposition
  ! above. A strided read of one double per row costs a line (8 doubles) per row.
  subroutine ground_truth(gt)
    integer(8), intent(out) :: gt(nt, nt)
    integer(8) :: rd(nt, nt)      ! rd(i, j): doubles i reads of j per iteration (1-based)
    integer :: px, py, t, s, ty, tx, rows, cols
    rd = 0
    call grid(px, py)
    do t = 1, nt
      select case (p)
      case (IHALO)                 ! one cell from each neighbour
        if (t > 1) rd(t, t - 1) = rd(t, t - 1) + H
        if (t < nt) rd(t, t + 1) = rd(t, t + 1) + H
      case (ISTENCIL)              ! column segment from y neighbours, row from x neighbours
        ty = (t - 1) / py
        tx = mod(t - 1, py)
        rows = lo(NY, ty + 1, px) - lo(NY, ty, px)
        cols = lo(NX, tx + 1, py) - lo(NX, tx, py)
        if (ty > 0) rd(t, t - py) = rd(t, t - py) + cols
        if (ty < px - 1) rd(t, t + py) = rd(t, t + py) + cols
        if (tx > 0) rd(t, t - 1) = rd(t, t - 1) + 8 * rows
        if (tx < py - 1) rd(t, t + 1) = rd(t, t + 1) + 8 * rows
      case (ITRANSPOSE)            ! slabs(t) x slabs(s) complex numbers of A from each other s
        do s = 1, nt
          if (s /= t) rd(t, s) = rd(t, s) + 2_8 * (lo(NM, t, nt) - lo(NM, t - 1, nt)) &
                                                * (lo(NM, s, nt) - lo(NM, s - 1, nt))
        end do
      case (IPIPELINE)             ! the whole upstream buffer
        if (t > 1) rd(t, t - 1) = rd(t, t - 1) + pipe_len()
      end select
    end do
    gt = (rd + transpose(rd)) * 8_8 * iters
  end subroutine ground_truth

  ! Digest of the bits of every field in memory order, as in layout.c: two polynomial (Horner)
  ! hashes of the 32-bit halves modulo 2^31 - 1; the products fit in 63 bits, so no overflow.
  integer(8) function checksum()
    integer(8), parameter :: MODP = 2147483647_8, B1 = 16807_8, B2 = 48271_8
    integer(8) :: h1, h2, bits, half(2)
    integer :: a, k, i
    h1 = 0
    h2 = 0
    do a = 1, 3
      do k = 1, NF
        select case (a)
        case (1)
          bits = transfer(u(k), bits)
        case (2)
          bits = transfer(v(k), bits)
        case default
          bits = transfer(f(k), bits)
        end select
        half = [iand(bits, 4294967295_8), ishft(bits, -32)]
        do i = 1, 2
          h1 = mod(h1 * B1 + half(i), MODP)
          h2 = mod(h2 * B2 + half(i), MODP)
        end do
      end do
    end do
    checksum = ior(ishft(h1, 32), h2)
  end function checksum

  function itoa(n) result(s)
    integer(8), intent(in) :: n
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write (buf, '(i0)') n
    s = trim(buf)
  end function itoa

  ! Fixed-point with a leading zero (F0.d would drop it, which JSON does not allow).
  function ftoa(x, d) result(s)
    double precision, intent(in) :: x
    integer, intent(in) :: d
    character(len=:), allocatable :: s
    character(len=40) :: buf, fmt
    write (fmt, '(a,i0,a)') '(f40.', d, ')'
    write (buf, fmt) x
    s = trim(adjustl(buf))
  end function ftoa

  function hex16(n) result(s)
    integer(8), intent(in) :: n
    character(len=16) :: s
    integer :: i
    write (s, '(z16.16)') n
    do i = 1, 16           ! lower case, as %016llx
      if (s(i:i) >= 'A' .and. s(i:i) <= 'F') s(i:i) = achar(iachar(s(i:i)) + 32)
    end do
  end function hex16

end program layout
