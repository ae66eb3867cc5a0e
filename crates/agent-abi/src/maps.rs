//! Lines of /proc/PID/maps, parsed without allocating (the agent parses its own maps in a
//! helper thread that must not allocate; the detector builds its owned records from these).

/// One line of /proc/PID/maps, borrowing its path from the text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapsLine<'a> {
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
    /// The path column as written (it may hold spaces): a file, `[heap]`, `[stack]`,
    /// `[anon:name]`, or empty.
    pub path: &'a [u8],
}

impl MapsLine<'_> {
    /// Backed by a file (inode not 0).
    pub fn file(&self) -> bool {
        self.inode != 0
    }
}

/// Parses `start-end perms offset major:minor inode [path]`; None for anything else.
pub fn parse_line(line: &[u8]) -> Option<MapsLine<'_>> {
    let mut fields = line
        .split(|&c| c == b' ' || c == b'\t')
        .filter(|f| !f.is_empty());
    let (range, perms, offset, dev, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    // The path is the rest of the line after the inode (it may hold spaces).
    let path = match fields.next() {
        Some(first) => {
            let at = first.as_ptr() as usize - line.as_ptr() as usize;
            let mut p = &line[at..];
            while let [rest @ .., b'\n' | b'\r'] = p {
                p = rest;
            }
            p
        }
        None => b"",
    };
    let dash = range.iter().position(|&c| c == b'-')?;
    let (start, end) = (parse_hex(&range[..dash])?, parse_hex(&range[dash + 1..])?);
    let colon = dev.iter().position(|&c| c == b':')?;
    let dev = parse_hex(&dev[..colon])? << 32 | parse_hex(&dev[colon + 1..])?;
    if perms.len() < 4 || start >= end || inode.is_empty() {
        return None;
    }
    // Decimal, any u64 (the kernel prints the full inode number).
    let inode = inode.iter().try_fold(0u64, |v, &c| {
        if !c.is_ascii_digit() {
            return None;
        }
        v.checked_mul(10)?.checked_add((c - b'0') as u64)
    })?;
    Some(MapsLine {
        start,
        end,
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        shared: perms[3] == b's',
        offset: parse_hex(offset)?,
        dev,
        inode,
        path,
    })
}

/// Hexadecimal without a prefix, 1 to 16 digits.
pub fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0u64, |v, &c| {
        let d = (c as char).to_digit(16)?;
        Some(v << 4 | d as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_kind() {
        let f =
            parse_line(b"7f0000001000-7f0000003000 rw-p 00002000 08:01 1234   /usr/lib/a b.so\n")
                .unwrap();
        assert_eq!(
            (f.start, f.end, f.offset),
            (0x7f0000001000, 0x7f0000003000, 0x2000)
        );
        assert!(f.read && f.write && !f.exec && !f.shared && f.file());
        assert_eq!(
            (f.dev, f.inode, f.path),
            (8 << 32 | 1, 1234, &b"/usr/lib/a b.so"[..])
        );
        let a = parse_line(b"55d0000-55d1000 rw-s 00000000 00:00 0").unwrap();
        assert!(a.shared && !a.file() && a.path.is_empty());
        let h = parse_line(b"1000-2000 r-xp 00000000 00:00 0 [heap]").unwrap();
        assert!(h.exec && h.path == b"[heap]");
        for bad in [
            "",
            "garbage",
            "7f00a000 rw-p 0 08:01 1",
            "7f00c000-7f00a000 rw-p 0 08:01 1",
            "7f00a000-7f00c000 rw 0 08:01 1",
            "7f00a000-7f00cxyz rw-p 0 08:01 1",
            "7f00a000-7f00c000 rw-p 0 08:01",
            "7f00a000-7f00c000 rw-p 0 08:01 12a",
            "7f00a000-7f00c000 rw-p 0 0801 1",
            "11112222333344445-7f00c000 rw-p 0 08:01 1",
        ] {
            assert_eq!(parse_line(bad.as_bytes()), None, "{bad:?}");
        }
        let big = parse_line(b"1000-2000 rw-p 0 00:2c 18446744073709551615 /x").unwrap();
        assert_eq!(big.inode, u64::MAX);
        assert!(parse_line(b"1000-2000 rw-p 0 00:2c 18446744073709551616 /x").is_none());
        assert_eq!(parse_hex(b"ff"), Some(255));
        assert_eq!(parse_hex(b"10000000000000000"), None);
    }
}
