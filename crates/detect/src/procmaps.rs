//! /proc/PID/maps: which mapping an address falls in, to build keys that are equal across
//! processes for shared memory: (device, inode, file offset) of a shared mapping.

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq)]
pub struct Vma {
    /// First address of the mapping.
    pub start: u64,
    /// First address past the mapping (exclusive).
    pub end: u64,
    /// Readable (`r`).
    pub read: bool,
    /// Writable (`w`).
    pub write: bool,
    /// Executable (`x`).
    pub exec: bool,
    /// A shared mapping (`s`; `p` is private copy-on-write).
    pub shared: bool,
    /// Offset in bytes of `start` in the mapped file (0 for anonymous memory).
    pub offset: u64,
    /// Device of the file as `major << 32 | minor` (0 for anonymous memory).
    pub dev: u64,
    /// Inode of the file (0 for anonymous memory).
    pub inode: u64,
    /// File path or pseudo-name (`[heap]`, `[stack]`, ...); empty for anonymous memory.
    pub path: String,
}

impl Vma {
    /// Private, writable, anonymous (heap or an anonymous mmap): memory one process owns,
    /// which page moves may follow. Stacks and file-backed or shared mappings are not.
    pub fn private_anon(&self) -> bool {
        self.read
            && self.write
            && !self.shared
            && self.inode == 0
            && (self.path.is_empty() || self.path == "[heap]")
    }
}

/// Parses the text of a maps file; malformed lines are skipped (the file is the kernel's).
pub fn parse(text: &str) -> Vec<Vma> {
    let mut out: Vec<Vma> = text.lines().filter_map(parse_line).collect();
    out.sort_by_key(|v| v.start);
    out
}

fn parse_line(line: &str) -> Option<Vma> {
    let l = agent_abi::maps::parse_line(line.as_bytes())?;
    Some(Vma {
        start: l.start,
        end: l.end,
        read: l.read,
        write: l.write,
        exec: l.exec,
        shared: l.shared,
        offset: l.offset,
        dev: l.dev,
        inode: l.inode,
        path: String::from_utf8_lossy(l.path).into_owned(),
    })
}

/// Reads /proc/PID/maps; None if the process is gone or unreadable.
pub fn read(pid: u32) -> Option<Vec<Vma>> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .ok()
        .map(|t| parse(&t))
}

/// The mapping holding `addr` in a sorted list.
pub fn find(vmas: &[Vma], addr: u64) -> Option<&Vma> {
    let i = vmas.partition_point(|v| v.end <= addr);
    vmas.get(i).filter(|v| v.start <= addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0a00000-55d0c0a21000 r-xp 00000000 fd:01 1311 /usr/bin/prog
7f0000000000-7f0000100000 rw-s 00000000 00:01 4242 /dev/zero (deleted)
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]
garbage line
";

    #[test]
    fn parses_and_finds() {
        let v = parse(SAMPLE);
        assert_eq!(v.len(), 4);
        let shm = find(&v, 0x7f0000000fff).expect("in the shared mapping");
        assert!(shm.shared && shm.write && !shm.exec);
        assert_eq!((shm.dev, shm.inode), (1, 4242));
        assert_eq!(shm.path, "/dev/zero (deleted)");
        assert!(find(&v, 0x7f0000100000).is_none(), "end is exclusive");
        assert_eq!(find(&v, 0x55d0c0a00000).map(|x| x.exec), Some(true));
        assert!(find(&v, 0).is_none());
        assert_eq!(
            find(&v, 0x7ffc00000010).map(|x| x.path.as_str()),
            Some("[stack]")
        );
    }

    #[test]
    fn private_anon_is_heap_and_anonymous_only() {
        let text = format!(
            "{SAMPLE}\
55d0c1000000-55d0c1100000 rw-p 00000000 00:00 0 [heap]
7f0000400000-7f0000500000 r--p 00000000 00:00 0
7f0000600000-7f0000700000 rw-p 00001000 fd:01 1311 /usr/bin/prog
"
        );
        let ranges: Vec<(u64, u64)> = parse(&text)
            .iter()
            .filter(|v| v.private_anon())
            .map(|v| (v.start, v.end))
            .collect();
        assert_eq!(
            ranges,
            [
                (0x55d0c1000000, 0x55d0c1100000),
                (0x7f0000200000, 0x7f0000300000)
            ]
        );
    }

    #[test]
    fn reads_own_maps() {
        let v = read(std::process::id()).expect("own maps");
        let here = &v as *const _ as u64;
        assert!(find(&v, here).is_some(), "a stack address is mapped");
    }
}
