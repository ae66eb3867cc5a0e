//! Fuzzing the matrix CSV reader (bounded: proptest's cases, run by `make test`): any text,
//! and valid matrices with one byte changed, give a matrix that obeys the format's rules or a
//! one-line error naming the input; never a panic.

use matrix::CommMatrix;
use proptest::prelude::*;

fn check(text: &str) {
    match CommMatrix::parse(text, "fuzz.csv") {
        Ok(m) => {
            assert!(m.n() > 0);
            for i in 0..m.n() {
                for j in 0..m.n() {
                    let v = m.get(i, j);
                    assert!(v.is_finite() && v >= 0.0, "{v} accepted from {text:?}");
                }
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.csv"), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_text(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn csv_like_text(text in "[0-9eE+.,\\- \\n\\r\\tNanInf]{0,300}") {
        check(&text);
    }

    #[test]
    fn valid_matrix_with_one_byte_changed(n in 1usize..6, pos in any::<prop::sample::Index>(),
                                          byte in any::<u8>()) {
        let mut m = CommMatrix::zeros(n);
        for i in 0..n {
            for j in 0..n {
                m.set(i, j, (i * 7 + j * 3) as f64 / 2.0);
            }
        }
        let mut bytes = m.to_csv().into_bytes();
        let k = pos.index(bytes.len());
        bytes[k] = byte;
        check(&String::from_utf8_lossy(&bytes));
    }
}
