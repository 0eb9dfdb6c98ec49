//! An fd described from what the kernel says of it: its link target, the
//! socket tables of `/proc/PID/net/*`, its fdinfo; and the text forms of an
//! fd and of a set of fds. Pure: the texts come in as strings.

use super::is_zero;
use super::syscall::MAX_SET_FDS;
use serde::Serialize;
use std::collections::HashMap;

/// Most peers of a pipe or socket named in a text form.
const TEXT_PEERS: usize = 2;
/// Most examples a summarised group of fds names.
pub(super) const SUMMARY_EXAMPLES: usize = 3;
/// Longest path or address a summarised text form shows (clipped in the middle).
pub(super) const TEXT_ITEM_MAX: usize = 48;

/// One file descriptor, described.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct FdDesc {
    pub(crate) fd: i32,
    /// file, fifo, pipe, tcp, tcp6, udp, udp6, unix, socket, eventfd, epoll,
    /// timerfd, signalfd, anon, other, or closed; `unrecorded` for an fd of
    /// a core, which keeps no fd table.
    pub(crate) kind: String,
    /// The link target (`socket:[123]`, `pipe:[45]`, a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) local: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) remote: Option<String>,
    /// TCP state (ESTABLISHED, LISTEN…); for unix sockets, the socket type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<String>,
    /// A TCP socket: seconds since it last carried data either way, as
    /// the kernel's `tcp_info` says (dump; the target's network namespace
    /// is ours).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) quiet_s: Option<f64>,
    /// Who holds the other end of a pipe or FIFO (`pid 12 "name" fd 4`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) peers: Vec<String>,
    /// An epoll set: the fds it watches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) watches: Vec<i32>,
    /// How many more fds it watches than `watches` lists.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) watches_unlisted: usize,
}

/// The kind of an fd that a core names in a call's arguments: a core keeps
/// no fd table, so what it was is not known.
pub(crate) const UNRECORDED: &str = "unrecorded";

/// One socket from `/proc/PID/net/{tcp,tcp6,udp,udp6}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InetSocket {
    pub(crate) inode: u64,
    pub(crate) local: String,
    pub(crate) remote: String,
    pub(crate) state: String,
}

/// One socket from `/proc/PID/net/unix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnixSocket {
    pub(crate) inode: u64,
    pub(crate) kind: &'static str,
    pub(crate) path: Option<String>,
}

fn tcp_state(code: u8) -> &'static str {
    match code {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "UNKNOWN",
    }
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6), as the kernel
/// prints them: each 32-bit word in host (little-endian) order.
fn parse_inet_addr(s: &str) -> Option<String> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    match words.len() {
        1 => {
            let ip = std::net::Ipv4Addr::from(words[0].to_le_bytes());
            Some(format!("{ip}:{port}"))
        }
        4 => {
            let mut b = [0u8; 16];
            for (i, w) in words.iter().enumerate() {
                b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            let ip = std::net::Ipv6Addr::from(b);
            match ip.to_ipv4_mapped() {
                Some(v4) => Some(format!("{v4}:{port}")),
                None => Some(format!("[{ip}]:{port}")),
            }
        }
        _ => None,
    }
}

/// The sockets of one `/proc/PID/net/{tcp,tcp6,udp,udp6}` table.
pub(crate) fn parse_inet_table(text: &str, tcp: bool) -> Vec<InetSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = parse_inet_addr(f.get(1)?)?;
            let remote = parse_inet_addr(f.get(2)?)?;
            let st = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            let state = if tcp {
                tcp_state(st).to_string()
            } else if st == 1 {
                "ESTABLISHED".to_string()
            } else {
                "UNCONN".to_string()
            };
            Some(InetSocket {
                inode,
                local,
                remote,
                state,
            })
        })
        .collect()
}

/// The sockets of `/proc/PID/net/unix`.
pub(crate) fn parse_unix_table(text: &str) -> Vec<UnixSocket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(8, char::is_whitespace).collect();
            // Num RefCount Protocol Flags Type St Inode [Path]
            let f: Vec<&str> = f.into_iter().filter(|s| !s.is_empty()).collect();
            let kind = match u32::from_str_radix(f.get(4)?, 16).ok()? {
                1 => "stream",
                2 => "dgram",
                5 => "seqpacket",
                _ => "unix",
            };
            let inode: u64 = f.get(6)?.parse().ok()?;
            let path = line
                .split_whitespace()
                .nth(7)
                .map(str::to_string)
                .filter(|p| !p.is_empty());
            Some(UnixSocket { inode, kind, path })
        })
        .collect()
}

/// The fds an epoll set watches, from its `/proc/PID/fdinfo/FD` (as
/// bounded as that text): the lowest [`MAX_SET_FDS`] in order (the kernel
/// lists them in its own), and how many more it lists.
pub(crate) fn parse_epoll_fdinfo(text: &str) -> (Vec<i32>, usize) {
    let mut fds: Vec<i32> = text
        .lines()
        .filter_map(|l| l.strip_prefix("tfd:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    fds.sort_unstable();
    let more = fds.len().saturating_sub(MAX_SET_FDS);
    fds.truncate(MAX_SET_FDS);
    (fds, more)
}

/// `socket:[123]` → ("socket", 123); also `pipe:[…]`.
pub(crate) fn link_inode(target: &str, prefix: &str) -> Option<u64> {
    target
        .strip_prefix(prefix)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The sockets of the target's network namespace, by inode (what fds link to).
#[derive(Debug, Default, Clone)]
pub(crate) struct SocketTables {
    pub(crate) inet: Vec<(&'static str, InetSocket)>,
    pub(crate) unix: Vec<UnixSocket>,
    /// Where each inode's first entry is in `inet`, and in `unix`: a
    /// process waiting on 9,000 sockets looks up 9,000 inodes among as
    /// many entries again.
    inet_at: HashMap<u64, usize>,
    unix_at: HashMap<u64, usize>,
}

impl SocketTables {
    pub(crate) fn from_texts(tables: &[(&'static str, Option<String>)]) -> SocketTables {
        let mut t = SocketTables::default();
        for (name, text) in tables {
            let Some(text) = text else { continue };
            match *name {
                "unix" => t.unix.extend(parse_unix_table(text)),
                n => {
                    let tcp = n.starts_with("tcp");
                    t.inet
                        .extend(parse_inet_table(text, tcp).into_iter().map(|s| (n, s)));
                }
            }
        }
        for (i, (_, s)) in t.inet.iter().enumerate() {
            t.inet_at.entry(s.inode).or_insert(i);
        }
        for (i, u) in t.unix.iter().enumerate() {
            t.unix_at.entry(u.inode).or_insert(i);
        }
        t
    }

    /// The internet socket with this inode, and its table's name.
    fn inet_of(&self, inode: u64) -> Option<&(&'static str, InetSocket)> {
        self.inet.get(*self.inet_at.get(&inode)?)
    }

    /// The unix socket with this inode.
    fn unix_of(&self, inode: u64) -> Option<&UnixSocket> {
        self.unix.get(*self.unix_at.get(&inode)?)
    }
}

/// Describe an fd from its link target; sockets need the tables (read
/// lazily: `tables` is called at most once per socket met).
pub(crate) fn describe_fd(
    fd: i32,
    target: Option<&str>,
    tables: &mut dyn FnMut() -> Option<std::rc::Rc<SocketTables>>,
) -> FdDesc {
    let mut d = FdDesc {
        fd,
        target: target.map(str::to_string),
        ..Default::default()
    };
    let Some(t) = target else {
        d.kind = "closed".into();
        return d;
    };
    if let Some(inode) = link_inode(t, "socket") {
        d.kind = "socket".into();
        if let Some(tables) = tables() {
            if let Some((name, s)) = tables.inet_of(inode) {
                d.kind = name.to_string();
                d.local = Some(s.local.clone());
                d.remote = Some(s.remote.clone());
                d.state = Some(s.state.clone());
            } else if let Some(u) = tables.unix_of(inode) {
                d.kind = "unix".into();
                d.local = u.path.clone();
                d.state = Some(u.kind.to_string());
            }
        }
    } else if link_inode(t, "pipe").is_some() {
        d.kind = "pipe".into();
    } else if let Some(anon) = t.strip_prefix("anon_inode:") {
        let anon = anon.trim_start_matches('[').trim_end_matches(']');
        d.kind = match anon {
            "eventfd" => "eventfd",
            "eventpoll" => "epoll",
            "timerfd" => "timerfd",
            "signalfd" => "signalfd",
            _ => "anon",
        }
        .into();
    } else if t.starts_with('/') {
        d.kind = "file".into();
    } else {
        d.kind = "other".into();
    }
    d
}

impl FdDesc {
    /// The part of an fd a short form names: the peer of a socket, the path of a file.
    pub(crate) fn short(&self) -> String {
        match self.kind.as_str() {
            "tcp" | "tcp6" | "udp" | "udp6" => match (&self.remote, &self.local) {
                (Some(r), Some(l)) if self.state.as_deref() == Some("LISTEN") || is_any(r) => {
                    format!("listen {l}")
                }
                (Some(r), _) => r.clone(),
                _ => self.kind.clone(),
            },
            "unix" => self.local.clone().unwrap_or_else(|| "unix".into()),
            "file" | "fifo" => self.target.clone().unwrap_or_default(),
            UNRECORDED => format!("fd {}", self.fd),
            k => k.to_string(),
        }
    }

    /// The long form: `fd 3: TCP 127.0.0.1:40412 → 127.0.0.1:8080 (ESTABLISHED)`,
    /// its paths and peers clipped to `item` characters each, at most
    /// [`TEXT_PEERS`] peers named. An epoll set says how many fds it
    /// watches (and which, when few).
    pub(crate) fn long(&self, item: usize) -> String {
        let c = |t: &str| clip(t, item);
        let mut s = format!("fd {}: ", self.fd);
        match self.kind.as_str() {
            "tcp" | "tcp6" | "udp" | "udp6" => {
                s += &format!(
                    "{} {} → {}",
                    self.kind.to_uppercase(),
                    self.local.as_deref().unwrap_or("?"),
                    self.remote.as_deref().unwrap_or("?")
                );
                match (&self.state, self.quiet_s) {
                    (Some(st), Some(q)) => s += &format!(" ({st}, no data for {q:.1}s)"),
                    (Some(st), None) => s += &format!(" ({st})"),
                    (None, Some(q)) => s += &format!(" (no data for {q:.1}s)"),
                    (None, None) => {}
                }
            }
            "unix" => {
                s += &format!(
                    "unix {} socket {}",
                    self.state.as_deref().unwrap_or(""),
                    c(self.local.as_deref().unwrap_or("(unnamed)"))
                );
                if let Some(t) = &self.target {
                    s += &format!(" {t}");
                }
            }
            "file" => s += &c(self.target.as_deref().unwrap_or("?")),
            "fifo" => s += &format!("FIFO {}", c(self.target.as_deref().unwrap_or("?"))),
            "closed" => s += "closed",
            "epoll" => s += "epoll",
            UNRECORDED => s += "not recorded in a core",
            _ => s += &c(self.target.as_deref().unwrap_or(&self.kind)),
        }
        if !self.peers.is_empty() {
            s += &format!(" (other end: {})", listed(&self.peers, TEXT_PEERS, item));
        }
        let watched = self.watches.len() + self.watches_unlisted;
        if watched > 0 {
            if watched <= SUMMARY_EXAMPLES {
                let w: Vec<String> = self.watches.iter().map(|f| f.to_string()).collect();
                s += &format!(" watching fds {}", w.join(", "));
            } else {
                s += &format!(" watching {watched} fds");
            }
        }
        s
    }
}

/// `s` in at most `max` characters: clipped in the middle, where a path
/// or an address says least.
pub(super) fn clip(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(1);
    let head: String = s.chars().take(keep / 2).collect();
    let tail: String = s.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}…{tail}")
}

/// The first `most` of `items` (each clipped), then "and N more".
fn listed(items: &[String], most: usize, item: usize) -> String {
    let shown: Vec<String> = items.iter().take(most).map(|i| clip(i, item)).collect();
    let mut s = shown.join(", ");
    if items.len() > most {
        s += &format!(" and {} more", items.len() - most);
    }
    s
}

/// The fds of a set that look alike, for a summary: `28 TCP to
/// 127.0.0.1:51234, 127.0.0.1:51236 and 26 more`.
struct FdGroup {
    rank: u8,
    one: String,
    many: String,
    /// Between the count and the examples.
    sep: &'static str,
    n: usize,
    /// Distinct examples in the order met, with how many fds each names.
    examples: Vec<(String, usize)>,
}

impl FdGroup {
    fn text(&self, examples: usize, item: usize) -> String {
        let label = if self.n == 1 { &self.one } else { &self.many };
        let mut s = format!("{} {label}", self.n);
        let shown = &self.examples[..examples.min(self.examples.len())];
        if shown.is_empty() {
            return s;
        }
        let whole = shown.len() == 1 && shown[0].1 == self.n;
        let names: Vec<String> = shown
            .iter()
            .map(|(e, k)| {
                if *k > 1 && !whole {
                    format!("{} ×{k}", clip(e, item))
                } else {
                    clip(e, item)
                }
            })
            .collect();
        s += self.sep;
        s += &names.join(", ");
        let named: usize = shown.iter().map(|(_, k)| k).sum();
        if named < self.n {
            s += &format!(" and {} more", self.n - named);
        }
        s
    }
}

/// The group an fd falls in: (rank, singular, plural, separator, example).
fn fd_group(d: &FdDesc) -> (u8, String, String, &'static str, Option<String>) {
    let same = |l: &str| (l.to_string(), l.to_string());
    let plural = |l: &str| (l.to_string(), format!("{l}s"));
    let (rank, (one, many), sep, example) = match d.kind.as_str() {
        k @ ("tcp" | "tcp6" | "udp" | "udp6") => {
            let k = k.to_uppercase();
            let listening =
                d.state.as_deref() == Some("LISTEN") || d.remote.as_deref().is_some_and(is_any);
            if listening {
                let word = if k.starts_with("TCP") {
                    "listening"
                } else {
                    "bound"
                };
                (0, same(&format!("{word} {k}")), " ", d.local.clone())
            } else {
                (1, same(&k), " to ", d.remote.clone())
            }
        }
        "unix" => (2, plural("unix socket"), " ", d.local.clone()),
        "socket" => (3, plural("socket"), " ", None),
        "fifo" => (4, plural("FIFO"), " ", d.target.clone()),
        "pipe" => (5, plural("pipe"), " ", None),
        "file" => (6, plural("file"), " ", d.target.clone()),
        "closed" => (8, plural("closed fd"), " ", None),
        UNRECORDED => (
            9,
            same("not recorded in a core"),
            ": fds ",
            Some(d.fd.to_string()),
        ),
        "anon" => (7, plural("anon inode"), " ", None),
        "other" => (7, same("other"), " ", d.target.clone()),
        k => (7, plural(k), " ", None),
    };
    (rank, one, many, sep, example)
}

/// A set of fds in few words: `31 fds: 1 listening TCP 127.0.0.1:8080; 30
/// TCP to 127.0.0.1:51234, 127.0.0.1:51236 and 28 more`, naming at most
/// `examples` of each kind; `groups` limits the kinds named (the rest
/// counted as others). `count`: whether to begin with the total.
pub(super) fn set_summary(
    fds: &[FdDesc],
    unlisted: usize,
    count: bool,
    examples: usize,
    groups: usize,
    item: usize,
) -> String {
    let mut all: Vec<FdGroup> = Vec::new();
    for d in fds {
        let (rank, one, many, sep, example) = fd_group(d);
        let at = match all.iter().position(|g| g.one == one) {
            Some(i) => i,
            None => {
                all.push(FdGroup {
                    rank,
                    one,
                    many,
                    sep,
                    n: 0,
                    examples: Vec::new(),
                });
                all.len() - 1
            }
        };
        let g = &mut all[at];
        g.n += 1;
        if let Some(e) = example {
            match g.examples.iter().position(|(x, _)| *x == e) {
                Some(i) => g.examples[i].1 += 1,
                // Bounded: a summary names a few of them.
                None if g.examples.len() < 64 => g.examples.push((e, 1)),
                None => {}
            }
        }
    }
    all.sort_by_key(|g| g.rank);
    let mut parts: Vec<String> = all
        .iter()
        .take(groups)
        .map(|g| g.text(examples, item))
        .collect();
    let others: usize = all.iter().skip(groups).map(|g| g.n).sum::<usize>() + unlisted;
    if others > 0 {
        let what = if unlisted > 0 && others == unlisted {
            "not listed"
        } else {
            "others"
        };
        parts.push(format!("{others} {what}"));
    }
    let body = parts.join("; ");
    if count {
        format!("{} fds: {body}", fds.len() + unlisted)
    } else {
        body
    }
}

pub(super) fn is_any(addr: &str) -> bool {
    addr.starts_with("0.0.0.0:") || addr.starts_with("[::]:")
}

pub(super) fn fdinfo_access(text: &str) -> Option<&'static str> {
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())?;
    Some(match flags & 3 {
        0 => "read end",
        1 => "write end",
        _ => "read-write",
    })
}
