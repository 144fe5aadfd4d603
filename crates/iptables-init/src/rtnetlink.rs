//! The TPROXY policy routing and the IPv6 `::6` source address over rtnetlink (`NETLINK_ROUTE`), in
//! place of iproute2's `ip`: what Istio's `tools/common/tproxy/run_linux.go` (`ConfigureRoutes`) does
//! through netlink. Each action is idempotent: an existing rule is found with a rule dump first
//! (the kernel accepts duplicate rules), an existing route or address answers `EEXIST`.
//!
//! Layout (kernel uapi `linux/rtnetlink.h`, `linux/fib_rules.h`, `linux/if_addr.h`): `nlmsghdr`, the
//! family header (`fib_rule_hdr`, `rtmsg` or `ifaddrmsg`), attributes; integers in host byte order.

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, SockProtocol};

use crate::config::Family;
use crate::netlink::{
    self, error_code, Attrs, NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use crate::routes::{route_command, RouteAction};

const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_NEWRULE: u16 = 32;
const RTM_DELRULE: u16 = 33;
const RTM_GETRULE: u16 = 34;
const NLM_F_EXCL: u16 = 0x200;
const FRA_FWMARK: u16 = 10;
const FRA_TABLE: u16 = 15;
const FR_ACT_TO_TBL: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_TABLE: u16 = 15;
const RTN_LOCAL: u8 = 2;
const RT_SCOPE_HOST: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

/// A route action that failed, named as the `ip` command it stands for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{command}` over rtnetlink: {errno}")]
pub struct RouteError {
    pub command: String,
    pub errno: Errno,
}

fn af(family: Family) -> u8 {
    match family {
        Family::V4 => libc::AF_INET as u8,
        Family::V6 => libc::AF_INET6 as u8,
    }
}

/// An rtnetlink socket in the calling thread's network namespace.
struct Rt {
    fd: OwnedFd,
    seq: u32,
}

impl Rt {
    fn open() -> Result<Rt, Errno> {
        let fd = netlink::open(SockProtocol::NetlinkRoute, 5)?;
        Ok(Rt { fd, seq: 0 })
    }

    fn message(&mut self, kind: u16, flags: u16, header: &[u8], attrs: &[(u16, &[u8])]) -> Vec<u8> {
        self.seq = self.seq.wrapping_add(1);
        let mut m = Vec::with_capacity(64);
        let start = netlink::begin(&mut m, kind, flags | NLM_F_REQUEST, self.seq);
        m.extend_from_slice(header);
        for (t, v) in attrs {
            netlink::push_attr(&mut m, *t, v);
        }
        netlink::end(&mut m, start);
        m
    }

    /// Sends one message and reads the answers to it until `done` returns a result for one of them.
    fn exchange<R>(
        &mut self,
        m: &[u8],
        buf_len: usize,
        mut done: impl FnMut(u16, &[u8]) -> Option<Result<R, Errno>>,
    ) -> Result<R, Errno> {
        let seq = self.seq;
        netlink::send(&self.fd, m)?;
        let mut buf = vec![0u8; buf_len];
        loop {
            // The kernel sends well-formed datagrams: a malformed tail is not read.
            for msg in
                netlink::receive(&self.fd, &mut buf, MsgFlags::empty())?.map_while(Result::ok)
            {
                if msg.seq == seq {
                    if let Some(r) = done(msg.kind, msg.payload) {
                        return r;
                    }
                }
            }
        }
    }

    /// Sends one request with an acknowledgement and returns the kernel's answer (0 or an errno).
    fn request(
        &mut self,
        kind: u16,
        flags: u16,
        header: &[u8],
        attrs: &[(u16, &[u8])],
    ) -> Result<Option<Errno>, Errno> {
        let m = self.message(kind, flags | NLM_F_ACK, header, attrs);
        self.exchange(&m, 16 * 1024, |kind, payload| {
            (kind == NLMSG_ERROR).then(|| {
                let code = error_code(payload).unwrap_or(-(Errno::EIO as i32));
                Ok((code != 0).then(|| Errno::from_raw(-code)))
            })
        })
    }

    /// The payloads of a dump's messages of type `want`.
    fn dump(&mut self, kind: u16, want: u16, header: &[u8]) -> Result<Vec<Vec<u8>>, Errno> {
        let m = self.message(kind, NLM_F_DUMP, header, &[]);
        let mut out = Vec::new();
        self.exchange(&m, 32 * 1024, |k, payload| match k {
            NLMSG_DONE => Some(Ok(std::mem::take(&mut out))),
            NLMSG_ERROR => Some(Err(Errno::from_raw(-error_code(payload).unwrap_or(0)))),
            k if k == want => {
                out.push(payload.to_vec());
                None
            }
            _ => None,
        })
    }
}

/// Attributes after a fixed header of `skip` bytes, as (type, value).
fn attrs(payload: &[u8], skip: usize) -> Vec<(u16, &[u8])> {
    Attrs(payload.get(skip..).unwrap_or(&[])).collect()
}

fn table_byte(table: u32) -> u8 {
    u8::try_from(table)
        .ok()
        .filter(|_| table < 256)
        .unwrap_or(0)
}

fn rule_header(family: Family, table: u32) -> [u8; 12] {
    [
        af(family),
        0,
        0,
        0,
        table_byte(table),
        0,
        0,
        FR_ACT_TO_TBL,
        0,
        0,
        0,
        0,
    ]
}

fn route_header(family: Family, table: u32) -> [u8; 12] {
    [
        af(family),
        0,
        0,
        0,
        table_byte(table),
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
        0,
        0,
        0,
        0,
    ]
}

fn lo_index() -> Result<u32, Errno> {
    nix::net::if_::if_nametoindex("lo")
}

fn v6_source() -> [u8; 16] {
    std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6).octets()
}

fn addr_header(index: u32) -> [u8; 8] {
    let i = index.to_ne_bytes();
    [libc::AF_INET6 as u8, 128, 0, 0, i[0], i[1], i[2], i[3]]
}

/// Whether the fwmark rule is present (`ip rule show fwmark M lookup T`).
fn rule_present(rt: &mut Rt, family: Family, mark: u32, table: u32) -> Result<bool, Errno> {
    let header = [af(family), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let rules = rt.dump(RTM_GETRULE, RTM_NEWRULE, &header)?;
    Ok(rules.iter().any(|r| {
        let a = attrs(r, 12);
        let u32_of = |t: u16| {
            a.iter()
                .find(|(k, _)| *k == t)
                .and_then(|(_, v)| v.get(..4))
                .map(|v| u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
        };
        let t = u32_of(FRA_TABLE).unwrap_or(u32::from(r.get(4).copied().unwrap_or(0)));
        r.get(7) == Some(&FR_ACT_TO_TBL) && u32_of(FRA_FWMARK) == Some(mark) && t == table
    }))
}

/// Applies one action; `Ok(true)` when it changed something.
fn add(rt: &mut Rt, action: &RouteAction) -> Result<bool, Errno> {
    let answer = match *action {
        RouteAction::AddLoopbackV6Source => {
            let src = v6_source();
            rt.request(
                RTM_NEWADDR,
                NLM_F_CREATE | NLM_F_EXCL,
                &addr_header(lo_index()?),
                &[(IFA_LOCAL, &src), (IFA_ADDRESS, &src)],
            )?
        }
        RouteAction::AddFwmarkRule {
            family,
            mark,
            table,
        } => {
            if rule_present(rt, family, mark, table)? {
                return Ok(false);
            }
            rt.request(
                RTM_NEWRULE,
                NLM_F_CREATE | NLM_F_EXCL,
                &rule_header(family, table),
                &[
                    (FRA_FWMARK, &mark.to_ne_bytes()),
                    (FRA_TABLE, &table.to_ne_bytes()),
                ],
            )?
        }
        RouteAction::AddLocalRoute { family, table } => rt.request(
            RTM_NEWROUTE,
            NLM_F_CREATE | NLM_F_EXCL,
            &route_header(family, table),
            &[
                (RTA_OIF, &lo_index()?.to_ne_bytes()),
                (RTA_TABLE, &table.to_ne_bytes()),
            ],
        )?,
    };
    match answer {
        None => Ok(true),
        Some(Errno::EEXIST) => Ok(false),
        Some(e) => Err(e),
    }
}

/// Undoes one action, "not there" counting as done. Every copy of the fwmark rule goes.
fn remove(rt: &mut Rt, action: &RouteAction) -> Result<(), Errno> {
    let gone = |a: Option<Errno>| match a {
        None | Some(Errno::ENOENT | Errno::ESRCH | Errno::EADDRNOTAVAIL) => Ok(()),
        Some(e) => Err(e),
    };
    match *action {
        RouteAction::AddLoopbackV6Source => {
            let src = v6_source();
            gone(rt.request(
                RTM_DELADDR,
                0,
                &addr_header(lo_index()?),
                &[(IFA_LOCAL, &src), (IFA_ADDRESS, &src)],
            )?)
        }
        RouteAction::AddFwmarkRule {
            family,
            mark,
            table,
        } => {
            while rule_present(rt, family, mark, table)? {
                rt.request(
                    RTM_DELRULE,
                    0,
                    &rule_header(family, table),
                    &[
                        (FRA_FWMARK, &mark.to_ne_bytes()),
                        (FRA_TABLE, &table.to_ne_bytes()),
                    ],
                )?
                .map_or(Ok(()), Err)?;
            }
            Ok(())
        }
        RouteAction::AddLocalRoute { family, table } => gone(rt.request(
            RTM_DELROUTE,
            0,
            &route_header(family, table),
            &[
                (RTA_OIF, &lo_index()?.to_ne_bytes()),
                (RTA_TABLE, &table.to_ne_bytes()),
            ],
        )?),
    }
}

fn error(action: &RouteAction, errno: Errno) -> RouteError {
    RouteError {
        command: route_command(action),
        errno,
    }
}

/// Applies `actions` in order and returns those that changed something. On a failure the ones
/// already added are removed again before the error is returned.
pub fn add_all(actions: &[RouteAction]) -> Result<Vec<RouteAction>, RouteError> {
    if actions.is_empty() {
        return Ok(Vec::new());
    }
    let mut rt = Rt::open().map_err(|e| error(&actions[0], e))?;
    let mut added = Vec::new();
    for a in actions {
        match add(&mut rt, a) {
            Ok(true) => added.push(a.clone()),
            Ok(false) => {}
            Err(e) => {
                for done in added.iter().rev() {
                    let _ = remove(&mut rt, done);
                }
                return Err(error(a, e));
            }
        }
    }
    Ok(added)
}

/// Removes actions [`add_all`] reported as added.
pub fn remove_added(added: &[RouteAction]) -> Result<(), RouteError> {
    let Some(first) = added.first() else {
        return Ok(());
    };
    let mut rt = Rt::open().map_err(|e| error(first, e))?;
    for a in added.iter().rev() {
        remove(&mut rt, a).map_err(|e| error(a, e))?;
    }
    Ok(())
}

/// `--cleanup-only`: removes the policy-routing rule and route of `actions`. The `::6` address stays:
/// a proxy that is still running may have sockets bound to it.
pub fn remove_routes(actions: &[RouteAction]) -> Result<(), RouteError> {
    let routes: Vec<&RouteAction> = actions
        .iter()
        .filter(|a| !matches!(a, RouteAction::AddLoopbackV6Source))
        .collect();
    let Some(first) = routes.first() else {
        return Ok(());
    };
    let mut rt = Rt::open().map_err(|e| error(first, e))?;
    for a in routes {
        remove(&mut rt, a).map_err(|e| error(a, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_parse_back() {
        let mut rt = Rt::open().expect("rtnetlink socket");
        let m = rt.message(
            RTM_NEWRULE,
            0,
            &rule_header(Family::V4, 133),
            &[(FRA_FWMARK, &1337u32.to_ne_bytes())],
        );
        let msgs: Vec<netlink::Message> = netlink::Messages(&m).map_while(Result::ok).collect();
        assert_eq!(msgs.len(), 1);
        let (kind, payload) = (msgs[0].kind, msgs[0].payload);
        assert_eq!(kind, RTM_NEWRULE);
        assert_eq!(payload[4], 133);
        assert_eq!(
            attrs(payload, 12),
            [(FRA_FWMARK, &1337u32.to_ne_bytes()[..])]
        );
        assert_eq!(table_byte(300), 0);
    }
}
