//! Datatypes and reduction operators of the MPI subset (handle values match mpi.h).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Char,
    SignedChar,
    UnsignedChar,
    Byte,
    Short,
    Int,
    Unsigned,
    Long,
    LongLong,
    UnsignedLong,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Float,
    Double,
    /// struct { double value; int index; } as MPI_DOUBLE_INT (16 bytes with padding).
    DoubleInt,
    /// struct { int value; int index; } as MPI_2INT.
    TwoInt,
}

impl Type {
    pub fn from_handle(h: i32) -> Option<Type> {
        Some(match h {
            1 => Type::Char,
            2 => Type::Byte,
            3 => Type::Int,
            4 => Type::Long,
            5 => Type::LongLong,
            6 => Type::UnsignedLong,
            7 => Type::Uint64,
            8 => Type::Float,
            9 => Type::Double,
            10 => Type::DoubleInt,
            11 => Type::TwoInt,
            12 => Type::Unsigned,
            13 => Type::Int64,
            14 => Type::Int32,
            15 => Type::UnsignedChar,
            16 => Type::Short,
            17 => Type::SignedChar,
            18 => Type::Uint32,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Type::Char | Type::SignedChar | Type::UnsignedChar | Type::Byte => 1,
            Type::Short => 2,
            Type::Int | Type::Unsigned | Type::Int32 | Type::Uint32 | Type::Float => 4,
            Type::Long
            | Type::LongLong
            | Type::UnsignedLong
            | Type::Int64
            | Type::Uint64
            | Type::Double
            | Type::TwoInt => 8,
            Type::DoubleInt => 16,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Sum,
    Prod,
    Max,
    Min,
    MinLoc,
    MaxLoc,
    Band,
    Bor,
    Bxor,
    Land,
    Lor,
}

impl Op {
    pub fn from_handle(h: i32) -> Option<Op> {
        Some(match h {
            1 => Op::Sum,
            2 => Op::Prod,
            3 => Op::Max,
            4 => Op::Min,
            5 => Op::MinLoc,
            6 => Op::MaxLoc,
            7 => Op::Band,
            8 => Op::Bor,
            9 => Op::Bxor,
            10 => Op::Land,
            11 => Op::Lor,
            _ => return None,
        })
    }
}

/// Whether `op` is defined on `ty` (MPI: arithmetic on numbers, bit ops on integers,
/// MINLOC/MAXLOC on pair types only).
pub fn valid(op: Op, ty: Type) -> bool {
    let pair = matches!(ty, Type::DoubleInt | Type::TwoInt);
    let float = matches!(ty, Type::Float | Type::Double);
    match op {
        Op::MinLoc | Op::MaxLoc => pair,
        Op::Band | Op::Bor | Op::Bxor => !pair && !float,
        Op::Sum | Op::Prod | Op::Max | Op::Min | Op::Land | Op::Lor => !pair && ty != Type::Byte,
    }
}

macro_rules! elementwise {
    ($t:ty, $acc:expr, $other:expr, $f:expr) => {{
        let n = $acc.len() / std::mem::size_of::<$t>();
        let a = $acc.as_mut_ptr() as *mut $t;
        let b = $other.as_ptr() as *const $t;
        for i in 0..n {
            // Unaligned: user buffers of char type may hold any alignment.
            unsafe {
                let x = std::ptr::read_unaligned(a.add(i));
                let y = std::ptr::read_unaligned(b.add(i));
                std::ptr::write_unaligned(a.add(i), $f(x, y));
            }
        }
    }};
}

macro_rules! arith {
    ($t:ty, $op:expr, $acc:expr, $other:expr, int) => {
        match $op {
            Op::Sum => elementwise!($t, $acc, $other, |x: $t, y: $t| x.wrapping_add(y)),
            Op::Prod => elementwise!($t, $acc, $other, |x: $t, y: $t| x.wrapping_mul(y)),
            Op::Max => elementwise!($t, $acc, $other, |x: $t, y: $t| x.max(y)),
            Op::Min => elementwise!($t, $acc, $other, |x: $t, y: $t| x.min(y)),
            Op::Band => elementwise!($t, $acc, $other, |x: $t, y: $t| x & y),
            Op::Bor => elementwise!($t, $acc, $other, |x: $t, y: $t| x | y),
            Op::Bxor => elementwise!($t, $acc, $other, |x: $t, y: $t| x ^ y),
            Op::Land => elementwise!($t, $acc, $other, |x: $t, y: $t| ((x != 0) && (y != 0))
                as $t),
            Op::Lor => elementwise!($t, $acc, $other, |x: $t, y: $t| ((x != 0) || (y != 0))
                as $t),
            Op::MinLoc | Op::MaxLoc => {}
        }
    };
    ($t:ty, $op:expr, $acc:expr, $other:expr, float) => {
        match $op {
            Op::Sum => elementwise!($t, $acc, $other, |x: $t, y: $t| x + y),
            Op::Prod => elementwise!($t, $acc, $other, |x: $t, y: $t| x * y),
            Op::Max => elementwise!($t, $acc, $other, |x: $t, y: $t| if y > x { y } else { x }),
            Op::Min => elementwise!($t, $acc, $other, |x: $t, y: $t| if y < x { y } else { x }),
            Op::Land => elementwise!($t, $acc, $other, |x: $t, y: $t| ((x != 0.0) && (y != 0.0))
                as u8 as $t),
            Op::Lor => elementwise!($t, $acc, $other, |x: $t, y: $t| ((x != 0.0) || (y != 0.0))
                as u8 as $t),
            _ => {}
        }
    };
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DoubleInt {
    v: f64,
    i: i32,
    _pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct TwoInt {
    v: i32,
    i: i32,
}

/// MINLOC/MAXLOC: the better value wins; on a tie the smaller index.
fn loc<V: PartialOrd + Copy>(min: bool, (xv, xi): (V, i32), (yv, yi): (V, i32)) -> (V, i32) {
    let better = if min { yv < xv } else { yv > xv };
    if better {
        (yv, yi)
    } else if yv == xv {
        (xv, xi.min(yi))
    } else {
        (xv, xi)
    }
}

/// acc[i] = acc[i] op other[i] over whole elements of `ty`. The caller checked `valid`.
pub fn reduce(op: Op, ty: Type, acc: &mut [u8], other: &[u8]) {
    debug_assert_eq!(acc.len(), other.len());
    match ty {
        Type::Char | Type::SignedChar => arith!(i8, op, acc, other, int),
        Type::UnsignedChar | Type::Byte => arith!(u8, op, acc, other, int),
        Type::Short => arith!(i16, op, acc, other, int),
        Type::Int | Type::Int32 => arith!(i32, op, acc, other, int),
        Type::Unsigned | Type::Uint32 => arith!(u32, op, acc, other, int),
        Type::Long | Type::LongLong | Type::Int64 => arith!(i64, op, acc, other, int),
        Type::UnsignedLong | Type::Uint64 => arith!(u64, op, acc, other, int),
        Type::Float => arith!(f32, op, acc, other, float),
        Type::Double => arith!(f64, op, acc, other, float),
        Type::DoubleInt => {
            let min = op == Op::MinLoc;
            elementwise!(DoubleInt, acc, other, |x: DoubleInt, y: DoubleInt| {
                let (v, i) = loc(min, (x.v, x.i), (y.v, y.i));
                DoubleInt { v, i, _pad: x._pad }
            })
        }
        Type::TwoInt => {
            let min = op == Op::MinLoc;
            elementwise!(TwoInt, acc, other, |x: TwoInt, y: TwoInt| {
                let (v, i) = loc(min, (x.v, x.i), (y.v, y.i));
                TwoInt { v, i }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
        let n = std::mem::size_of_val(v);
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }.to_vec()
    }

    #[test]
    fn sums_and_bit_ops() {
        let mut a = bytes(&[1i32, 2, -3]);
        reduce(Op::Sum, Type::Int, &mut a, &bytes(&[10i32, 20, 30]));
        assert_eq!(a, bytes(&[11i32, 22, 27]));
        let mut b = bytes(&[0b1100u64]);
        reduce(Op::Band, Type::Uint64, &mut b, &bytes(&[0b1010u64]));
        assert_eq!(b, bytes(&[0b1000u64]));
        reduce(Op::Bor, Type::Uint64, &mut b, &bytes(&[0b0001u64]));
        assert_eq!(b, bytes(&[0b1001u64]));
        let mut d = bytes(&[1.5f64, -2.0]);
        reduce(Op::Max, Type::Double, &mut d, &bytes(&[1.0f64, 3.0]));
        assert_eq!(d, bytes(&[1.5f64, 3.0]));
    }

    #[test]
    fn minloc_maxloc_break_ties_by_index() {
        let mut a = bytes(&[
            DoubleInt {
                v: 2.0,
                i: 5,
                _pad: 0,
            },
            DoubleInt {
                v: 1.0,
                i: 7,
                _pad: 0,
            },
        ]);
        let b = bytes(&[
            DoubleInt {
                v: 2.0,
                i: 3,
                _pad: 0,
            },
            DoubleInt {
                v: 0.5,
                i: 9,
                _pad: 0,
            },
        ]);
        reduce(Op::MinLoc, Type::DoubleInt, &mut a, &b);
        let r: &[DoubleInt] = unsafe { std::slice::from_raw_parts(a.as_ptr() as *const _, 2) };
        assert_eq!((r[0].v, r[0].i), (2.0, 3));
        assert_eq!((r[1].v, r[1].i), (0.5, 9));
        let mut c = bytes(&[TwoInt { v: 4, i: 1 }]);
        reduce(
            Op::MaxLoc,
            Type::TwoInt,
            &mut c,
            &bytes(&[TwoInt { v: 9, i: 2 }]),
        );
        assert_eq!(c, bytes(&[TwoInt { v: 9, i: 2 }]));
    }

    #[test]
    fn validity_follows_mpi() {
        assert!(valid(Op::MinLoc, Type::TwoInt));
        assert!(!valid(Op::MinLoc, Type::Int));
        assert!(!valid(Op::Band, Type::Double));
        assert!(valid(Op::Band, Type::Byte));
        assert!(!valid(Op::Sum, Type::DoubleInt));
        assert_eq!(Type::from_handle(10).map(Type::size), Some(16));
    }
}
