//! Virtual -> physical translation through /proc/self/pagemap.
//!
//! Each virtual page has one 64-bit entry: bit 63 "present", bits 0-54 the page frame number.
//! Since Linux 4.0 the frame number reads as 0 unless the reader has CAP_SYS_ADMIN; that case is
//! reported as a missing privilege, never used as an address.

use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::AllocError;

const PRESENT: u64 = 1 << 63;
const PFN_MASK: u64 = (1 << 55) - 1;

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// An open pagemap file.
pub struct Pagemap {
    file: File,
    path: PathBuf,
    page: u64,
}

impl Pagemap {
    /// Opens `path` (normally /proc/self/pagemap).
    pub fn open(path: &Path) -> Result<Pagemap, AllocError> {
        let file = File::open(path).map_err(|e| match e.kind() {
            ErrorKind::NotFound => AllocError::PagemapMissing(path.to_path_buf()),
            ErrorKind::PermissionDenied => AllocError::NoPrivilege(path.to_path_buf()),
            _ => AllocError::PagemapIo(path.to_path_buf(), e),
        })?;
        Ok(Pagemap {
            file,
            path: path.to_path_buf(),
            page: page_size() as u64,
        })
    }

    /// Physical addresses of `pages` consecutive pages starting at the page of `vaddr`.
    pub fn physical_pages(&self, vaddr: u64, pages: usize) -> Result<Vec<u64>, AllocError> {
        let first = vaddr / self.page;
        let mut raw = vec![0u8; pages * 8];
        self.file
            .read_exact_at(&mut raw, first * 8)
            .map_err(|e| AllocError::PagemapIo(self.path.clone(), e))?;
        raw.chunks_exact(8)
            .enumerate()
            .map(|(i, b)| {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                let entry = u64::from_ne_bytes(word);
                let va = (first + i as u64) * self.page;
                if entry & PRESENT == 0 {
                    return Err(AllocError::NotPresent(va));
                }
                match entry & PFN_MASK {
                    0 => Err(AllocError::NoPrivilege(self.path.clone())),
                    pfn => Ok(pfn * self.page),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_pagemap_names_the_path() {
        let Err(e) = Pagemap::open(Path::new("/nonexistent/pagemap")) else {
            panic!("opening a missing pagemap must fail");
        };
        assert!(matches!(e, AllocError::PagemapMissing(_)));
        assert!(e.to_string().contains("/nonexistent/pagemap"), "{e}");
    }

    #[test]
    fn a_file_of_zeros_reads_as_not_present() {
        let dir = std::env::temp_dir().join(format!("huddle-alloc-pm-{}", std::process::id()));
        std::fs::write(&dir, vec![0u8; 64]).unwrap();
        let pm = Pagemap::open(&dir).unwrap();
        let e = pm.physical_pages(0, 2).unwrap_err();
        assert!(matches!(e, AllocError::NotPresent(0)), "{e}");
        // Present but frame 0: what an unprivileged reader sees.
        let mut entry = vec![0u8; 8];
        entry.copy_from_slice(&PRESENT.to_ne_bytes());
        std::fs::write(&dir, &entry).unwrap();
        let e = Pagemap::open(&dir)
            .unwrap()
            .physical_pages(0, 1)
            .unwrap_err();
        assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");
        std::fs::remove_file(&dir).unwrap();
    }
}
