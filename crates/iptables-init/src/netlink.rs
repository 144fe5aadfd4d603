//! Netlink framing shared by the route actions over rtnetlink, the native nf_tables batch and the
//! nf_tables existence probe ([`probe`]) both backends ask: a socket in the calling thread's network
//! namespace, writing message headers and attributes, and reading the messages and attributes of a
//! received datagram.
//!
//! Layout (kernel uapi `linux/netlink.h`): each message is an `nlmsghdr` (16 bytes: length, type, flags,
//! sequence number, port id, in host byte order) and its payload; an attribute (`nlattr`) is a length and
//! a type (4 bytes), the value, and padding to 4 bytes.

use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{
    recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::TimeVal;

mod probe;
mod uapi;

pub(crate) use probe::{Probe, ProbeError};
pub(crate) use uapi::*;

/// The flags of an attribute type (`NLA_F_NESTED`, `NLA_F_NET_BYTEORDER`), masked off when reading.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// Opens a netlink socket of `protocol` whose every receive waits at most `timeout_secs`: a missing
/// answer must fail a run, never hang it.
pub(crate) fn open(protocol: SockProtocol, timeout_secs: i64) -> Result<OwnedFd, Errno> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        protocol,
    )?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(timeout_secs, 0))?;
    Ok(fd)
}

/// Sends `datagram` to the kernel (port 0).
pub(crate) fn send(fd: &impl AsFd, datagram: &[u8]) -> Result<(), Errno> {
    sendto(
        fd.as_fd().as_raw_fd(),
        datagram,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map(|_| ())
}

/// Receives one datagram into `buf` and returns its messages.
pub(crate) fn receive<'a>(
    fd: &impl AsFd,
    buf: &'a mut [u8],
    flags: MsgFlags,
) -> Result<Messages<'a>, Errno> {
    let n = recv(fd.as_fd().as_raw_fd(), buf, flags)?;
    Ok(Messages(&buf[..n]))
}

/// Appends the header of a message of type `kind` to `out` and returns where the message starts, for
/// [`end`] to write its length once the payload follows. The port id is 0: the kernel fills in ours.
pub(crate) fn begin(out: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    start
}

/// Writes the length of the message [`begin`] started at `start`, which runs to the end of `out`.
pub(crate) fn end(out: &mut [u8], start: usize) {
    // A message is at most one batch, far below 4 GiB.
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// Appends an attribute of type `kind` holding `value`, padded to 4 bytes.
pub(crate) fn push_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    // Attributes here are names, addresses and integers: a few hundred bytes at most.
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// One netlink message of a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message<'a> {
    pub kind: u16,
    pub seq: u32,
    /// What follows the header.
    pub payload: &'a [u8],
}

/// A datagram the kernel would not send: the messages before it were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    /// Fewer bytes left than a message header.
    #[error("truncated message header")]
    Header,
    /// A message length shorter than its header or beyond the datagram.
    #[error("message length out of bounds")]
    Length,
}

/// The messages of a received datagram; the first malformed one ends it.
pub(crate) struct Messages<'a>(pub &'a [u8]);

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let Some(h) = self.0.get(..HEADER_LEN) else {
            self.0 = &[];
            return Some(Err(Malformed::Header));
        };
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len < HEADER_LEN || len > self.0.len() {
            self.0 = &[];
            return Some(Err(Malformed::Length));
        }
        let msg = Message {
            kind: u16::from_ne_bytes([h[4], h[5]]),
            seq: u32::from_ne_bytes([h[8], h[9], h[10], h[11]]),
            payload: &self.0[HEADER_LEN..len],
        };
        self.0 = self.0.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some(Ok(msg))
    }
}

/// The attributes of a payload, as (type without its flags, value); a malformed one ends them.
pub(crate) struct Attrs<'a>(pub &'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.0;
        if rest.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        if len < 4 || len > rest.len() {
            self.0 = &[];
            return None;
        }
        self.0 = rest.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((
            u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK,
            &rest[4..len],
        ))
    }
}

/// The error code of an `NLMSG_ERROR` message's payload: 0 for an acknowledgement, `-errno` for a
/// refusal; `None` when the payload is too short to hold one.
pub(crate) fn error_code(payload: &[u8]) -> Option<i32> {
    payload
        .get(..4)
        .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
}

/// The value of the first attribute of type `kind` among `attrs`.
pub(crate) fn attr(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    Attrs(attrs).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_written_reads_back() {
        let mut out = vec![9, 9, 9, 9];
        let start = begin(&mut out, 0x0a04, NLM_F_REQUEST | NLM_F_ACK, 7);
        push_attr(&mut out, 1 | 0x8000, b"nat\0");
        push_attr(&mut out, 3, b"ab");
        end(&mut out, start);
        assert_eq!(start, 4);
        assert_eq!(out.len(), 4 + 16 + 8 + 8);
        let msgs: Vec<Message> = Messages(&out[4..])
            .collect::<Result<_, _>>()
            .expect("one message");
        assert_eq!(msgs.len(), 1);
        assert_eq!((msgs[0].kind, msgs[0].seq), (0x0a04, 7));
        assert_eq!(
            u16::from_ne_bytes([out[10], out[11]]),
            NLM_F_REQUEST | NLM_F_ACK
        );
        let attrs: Vec<(u16, &[u8])> = Attrs(msgs[0].payload).collect();
        assert_eq!(attrs, [(1, &b"nat\0"[..]), (3, &b"ab"[..])]);
        assert_eq!(attr(msgs[0].payload, 3), Some(&b"ab"[..]));
        assert_eq!(attr(msgs[0].payload, 2), None);
    }

    #[test]
    fn malformed_datagrams_end_with_an_error() {
        let mut two = Vec::new();
        for seq in [5u32, 6] {
            let start = begin(&mut two, NLMSG_ERROR, 0, seq);
            two.extend_from_slice(&(-(Errno::ENOENT as i32)).to_ne_bytes());
            end(&mut two, start);
        }
        let codes: Vec<(u32, Option<i32>)> = Messages(&two)
            .map(|m| m.map(|m| (m.seq, error_code(m.payload))))
            .collect::<Result<_, _>>()
            .expect("two messages");
        assert_eq!(codes, [(5, Some(-2)), (6, Some(-2))]);
        let mut long = two.clone();
        long[0] = 200;
        assert_eq!(Messages(&long).next(), Some(Err(Malformed::Length)));
        assert_eq!(Messages(&two[..10]).next(), Some(Err(Malformed::Header)));
        assert_eq!(Attrs(&[8, 0, 1, 0, 1]).next(), None);
    }
}
