//! Reading a file the user named as input (a matrix, an hwloc XML, a rule table). A FIFO, a
//! character device such as /dev/zero or a socket may never end, and a huge file would be
//! read whole into memory; so only regular files are read, and at most [`limit`] bytes
//! (256 MiB, or `HUDDLE_MAX_INPUT_BYTES`): over it, the reader says so instead of growing.

use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The default size limit: far above any real matrix or topology (a 4096-task matrix of
/// 12-character numbers is 200 MiB).
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// Why an input file was not read; the message names no path (the caller adds it).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InputError {
    #[error("no such file")]
    NotFound,
    #[error("permission denied")]
    PermissionDenied,
    #[error("is a directory, not a file")]
    Directory,
    #[error("is a {0}, not a regular file (it may never end)")]
    NotRegular(&'static str),
    #[error("over the input size limit of {limit} bytes (HUDDLE_MAX_INPUT_BYTES raises it)")]
    TooLarge { limit: u64 },
    #[error("{0}")]
    Io(String),
}

/// The size limit in bytes: `HUDDLE_MAX_INPUT_BYTES` if it is a positive integer, else
/// [`DEFAULT_LIMIT`].
pub fn limit() -> u64 {
    std::env::var("HUDDLE_MAX_INPUT_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_LIMIT)
}

fn io_error(e: std::io::Error) -> InputError {
    match e.kind() {
        std::io::ErrorKind::NotFound => InputError::NotFound,
        std::io::ErrorKind::PermissionDenied => InputError::PermissionDenied,
        _ => InputError::Io(e.to_string()),
    }
}

/// The bytes of `path`, if it is a regular file of at most [`limit`] bytes.
pub fn read(path: &Path) -> Result<Vec<u8>, InputError> {
    read_limited(path, limit())
}

/// The bytes of `path`, if it is a regular file of at most `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let file_type = std::fs::metadata(path).map_err(io_error)?.file_type();
    if file_type.is_dir() {
        return Err(InputError::Directory);
    }
    if !file_type.is_file() {
        return Err(InputError::NotRegular(if file_type.is_fifo() {
            "FIFO"
        } else if file_type.is_char_device() {
            "character device"
        } else if file_type.is_block_device() {
            "block device"
        } else if file_type.is_socket() {
            "socket"
        } else {
            "special file"
        }));
    }
    let file = std::fs::File::open(path).map_err(io_error)?;
    // The file may grow after the check: read one byte past the limit to notice.
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_text(path: &Path) -> Result<String, InputError> {
    String::from_utf8(read(path)?).map_err(|_| InputError::Io("not UTF-8 text".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_and_everything_else_refused() {
        let dir = std::env::temp_dir().join(format!("inputfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("m.csv");
        std::fs::write(&f, "0,1\n1,0\n").unwrap();
        assert_eq!(read_text(&f).unwrap(), "0,1\n1,0\n");
        assert_eq!(read_limited(&f, 8).unwrap().len(), 8);
        assert_eq!(read_limited(&f, 7), Err(InputError::TooLarge { limit: 7 }));
        assert_eq!(read(&dir), Err(InputError::Directory));
        assert_eq!(read(&dir.join("none")), Err(InputError::NotFound));
        assert_eq!(
            read(Path::new("/dev/zero")),
            Err(InputError::NotRegular("character device"))
        );
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read(&fifo), Err(InputError::NotRegular("FIFO")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
