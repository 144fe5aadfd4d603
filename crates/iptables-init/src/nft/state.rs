//! What the kernel holds of Istio's tables, read back over netlink and compared with a ruleset, so
//! that a rerun of the same configuration changes nothing (counters and rule handles included).
//!
//! Both sides are brought to one canonical form: per table its chains in order (hook, priority, type,
//! policy) and per chain its rules, each a list of expressions with their attributes sorted by type.
//! Counter values are left out; a set lookup is represented by the set's elements instead of the set's
//! name. Anything the model never creates (table flags, comments, rule userdata, sets nobody looks up)
//! makes the state differ, so the run re-creates the tables.

use super::model::{Ruleset, Stmt, TableId};
use super::netlink::{attr, encode_rule, Buf, Groups, NetlinkError, Socket, UnknownGroup};

use crate::netlink::{
    NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET, NFT_MSG_GETSETELEM, NFT_MSG_GETTABLE,
    NFT_MSG_NEWCHAIN, NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_MSG_NEWTABLE,
};

/// An attribute value in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Val {
    Bytes(Vec<u8>),
    Nest(Vec<(u16, Val)>),
}

/// One expression: its name and its sorted attributes.
type Expr = (String, Vec<(u16, Val)>);

/// The sorted keys of a set, by the set's name.
type SetKeys<'a> = dyn FnMut(&str) -> Result<Vec<Vec<u8>>, NetlinkError> + 'a;

#[derive(Debug, Clone, PartialEq, Eq)]
struct ChainState {
    name: String,
    /// Hook number, priority, type and policy of a base chain.
    base: Option<(u32, i32, String, u32)>,
    rules: Vec<Vec<Expr>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct TableState {
    name: String,
    chains: Vec<ChainState>,
}

/// The attributes of a message payload or a nested attribute, as (type without flags, value).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        if len < 4 || len > b.len() {
            break;
        }
        out.push((u16::from_ne_bytes([b[2], b[3]]) & 0x3fff, &b[4..len]));
        b = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    out
}

fn be32(v: &[u8]) -> Option<u32> {
    v.get(..4)
        .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

fn cstr(v: &[u8]) -> String {
    String::from_utf8_lossy(v.split(|&b| b == 0).next().unwrap_or_default()).into_owned()
}

/// An `NFTA_DATA_*` nest: a value, or a verdict (code and chain).
fn data(v: &[u8]) -> Val {
    let mut out: Vec<(u16, Val)> = attrs(v)
        .into_iter()
        .map(|(t, v)| match t {
            2 => {
                let mut verdict: Vec<(u16, Val)> = attrs(v)
                    .into_iter()
                    .map(|(t, v)| {
                        (
                            t,
                            Val::Bytes(if t == 2 {
                                cstr(v).into_bytes()
                            } else {
                                v.to_vec()
                            }),
                        )
                    })
                    .collect();
                verdict.sort();
                (t, Val::Nest(verdict))
            }
            _ => (t, Val::Bytes(v.to_vec())),
        })
        .collect();
    out.sort();
    Val::Nest(out)
}

/// The canonical expressions of an `NFTA_RULE_EXPRESSIONS` payload; `set` gives the sorted elements
/// of the set a lookup names.
fn expressions(list: &[u8], set: &mut SetKeys<'_>) -> Result<Vec<Expr>, NetlinkError> {
    let mut out = Vec::new();
    for (_, elem) in attrs(list) {
        let a = attrs(elem);
        let name = a
            .iter()
            .find(|(t, _)| *t == 1)
            .map(|(_, v)| cstr(v))
            .unwrap_or_default();
        let body = a
            .iter()
            .find(|(t, _)| *t == 2)
            .map(|(_, v)| *v)
            .unwrap_or_default();
        let mut fields: Vec<(u16, Val)> = Vec::new();
        for (t, v) in attrs(body) {
            let nested = matches!(
                (name.as_str(), t),
                ("cmp", 3) | ("immediate", 2) | ("bitwise", 4 | 5 | 7)
            );
            match (name.as_str(), t) {
                ("counter", _) => {}
                // NFTA_LOOKUP_SET: the set's elements stand for it; NFTA_LOOKUP_SET_ID is ours only.
                ("lookup", 1) => fields.push((
                    1,
                    Val::Nest(
                        set(&cstr(v))?
                            .into_iter()
                            .map(|e| (1, Val::Bytes(e)))
                            .collect(),
                    ),
                )),
                ("lookup", 4) => {}
                // NFTA_BITWISE_OP NFT_BITWISE_BOOL (0) is the default nft does not send.
                ("bitwise", 6) if be32(v) == Some(0) => {}
                _ if nested => fields.push((t, data(v))),
                _ => fields.push((t, Val::Bytes(v.to_vec()))),
            }
        }
        fields.sort();
        out.push((name, fields));
    }
    Ok(out)
}

/// The canonical form of what `rs` installs.
fn desired(rs: &Ruleset, groups: &dyn Groups) -> Result<Vec<TableState>, UnknownGroup> {
    let mut tables = Vec::new();
    for t in &rs.tables {
        let mut chains = Vec::new();
        for c in &t.chains {
            let mut rules = Vec::new();
            for rule in t.chain_rules(c.name) {
                let sets: Vec<Vec<u16>> = rule
                    .stmts
                    .iter()
                    .filter_map(|s| match s {
                        Stmt::PortNotIn { ports, .. } => Some(ports.clone()),
                        _ => None,
                    })
                    .collect();
                let ids: Vec<u32> = (1..=sets.len() as u32).collect();
                let mut b = Buf(Vec::new());
                encode_rule(&mut b, rule, groups, &ids)?;
                let mut next = sets.iter();
                let mut set = |_: &str| {
                    let mut e: Vec<Vec<u8>> = next
                        .next()
                        .map(|p| p.iter().map(|p| p.to_be_bytes().to_vec()).collect())
                        .unwrap_or_default();
                    e.sort();
                    Ok(e)
                };
                // Our own bytes always parse.
                rules.push(expressions(&b.0, &mut set).unwrap_or_default());
            }
            chains.push(ChainState {
                name: c.name.to_string(),
                base: c.base.map(|b| {
                    let hook = match b.hook {
                        super::model::Hook::Prerouting => 0,
                        super::model::Hook::Output => 3,
                    };
                    (hook, b.priority, b.kind.as_str().to_string(), 1)
                }),
                rules,
            });
        }
        tables.push(TableState {
            name: t.id.name().to_string(),
            chains,
        });
    }
    Ok(tables)
}

/// The canonical form of what the kernel holds of our tables, or `None` when it holds something the
/// model cannot have made (then the tables are simply re-created).
fn current(socket: &Socket) -> Result<Option<Vec<TableState>>, NetlinkError> {
    let ours = |name: &str| TableId::ALL.iter().any(|t| t.name() == name);
    let mut tables = Vec::new();
    for t in socket.dump(NFT_MSG_GETTABLE, NFT_MSG_NEWTABLE, &[])? {
        let a = attrs(&t);
        let name = a
            .iter()
            .find(|(k, _)| *k == 1)
            .map(|(_, v)| cstr(v))
            .unwrap_or_default();
        if !ours(&name) {
            continue;
        }
        // NFTA_TABLE_FLAGS (dormant, owner) or NFTA_TABLE_USERDATA (a comment).
        let flags = a
            .iter()
            .find(|(k, _)| *k == 2)
            .and_then(|(_, v)| be32(v))
            .unwrap_or(0);
        if flags != 0 || a.iter().any(|(k, _)| *k == 6) {
            return Ok(None);
        }
        tables.push(name);
    }
    // Tables in our order, as the model lists them.
    tables.sort_by_key(|n| TableId::ALL.iter().position(|t| t.name() == n));
    let chains = socket.dump(NFT_MSG_GETCHAIN, NFT_MSG_NEWCHAIN, &[])?;
    let mut out = Vec::new();
    for table in tables {
        let sets = socket.dump(NFT_MSG_GETSET, NFT_MSG_NEWSET, &[(1, &table)])?;
        let mut lookups = 0;
        let mut state = TableState {
            name: table.clone(),
            chains: Vec::new(),
        };
        for c in &chains {
            let a = attrs(c);
            let get = |k: u16| a.iter().find(|(t, _)| *t == k).map(|(_, v)| *v);
            if get(1).map(cstr).as_deref() != Some(table.as_str()) {
                continue;
            }
            if get(12).is_some() {
                return Ok(None); // NFTA_CHAIN_USERDATA: a comment.
            }
            let base = match get(4) {
                Some(hook) => {
                    let h = attrs(hook);
                    let num = h.iter().find(|(t, _)| *t == 1).and_then(|(_, v)| be32(v));
                    let prio = h.iter().find(|(t, _)| *t == 2).and_then(|(_, v)| be32(v));
                    let (Some(num), Some(prio)) = (num, prio) else {
                        return Ok(None);
                    };
                    let kind = get(7).map(cstr).unwrap_or_default();
                    let policy = get(5).and_then(be32).unwrap_or(1);
                    Some((num, prio as i32, kind, policy))
                }
                None => None,
            };
            let name = get(3).map(cstr).unwrap_or_default();
            let mut rules = Vec::new();
            for r in socket.dump(NFT_MSG_GETRULE, NFT_MSG_NEWRULE, &[(1, &table), (2, &name)])? {
                let ra = attrs(&r);
                if ra.iter().any(|(t, _)| *t == 7) {
                    return Ok(None); // NFTA_RULE_USERDATA: a comment.
                }
                let list = ra
                    .iter()
                    .find(|(t, _)| *t == 4)
                    .map(|(_, v)| *v)
                    .unwrap_or_default();
                let mut set = |set_name: &str| {
                    lookups += 1;
                    set_elements(socket, &table, set_name)
                };
                rules.push(expressions(list, &mut set)?);
            }
            state.chains.push(ChainState { name, base, rules });
        }
        // A set no rule of ours looks up is something we did not make.
        if sets.len() != lookups {
            return Ok(None);
        }
        out.push(state);
    }
    Ok(Some(out))
}

/// The sorted keys of set `set` of table `table`.
fn set_elements(socket: &Socket, table: &str, set: &str) -> Result<Vec<Vec<u8>>, NetlinkError> {
    let mut keys = Vec::new();
    for m in socket.dump(
        NFT_MSG_GETSETELEM,
        NFT_MSG_NEWSETELEM,
        &[(1, table), (2, set)],
    )? {
        if let Some(list) = attr(&m, 3) {
            for (_, elem) in attrs(list) {
                let key = attrs(elem)
                    .into_iter()
                    .find(|(t, _)| *t == 1)
                    .map(|(_, v)| v);
                if let Some(value) = key.and_then(|k| attr(k, 1)) {
                    keys.push(value.to_vec());
                }
            }
        }
    }
    keys.sort();
    Ok(keys)
}

/// Whether the kernel already holds exactly `rs`'s tables (and no other table of ours), read while
/// the ruleset generation stayed `genid`.
pub fn matches(
    socket: &Socket,
    rs: &Ruleset,
    genid: u32,
    groups: &dyn Groups,
) -> Result<bool, NftStateError> {
    let want = desired(rs, groups)?;
    let Some(have) = current(socket)? else {
        return Ok(false);
    };
    Ok(have == want && socket.generation()? == genid)
}

/// Why the state could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum NftStateError {
    /// An owner group name of the configuration is not in `/etc/group`.
    #[error(transparent)]
    Group(#[from] UnknownGroup),
    /// Reading the ruleset back failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::{CtState, Rule};
    use crate::nft::netlink::GroupFile;

    fn canonical(rule: &Rule, keys: Vec<Vec<u8>>) -> Vec<Expr> {
        let mut b = Buf(Vec::new());
        encode_rule(&mut b, rule, &GroupFile(String::new()), &[7]).expect("encodes");
        let mut set = |_: &str| Ok(keys.clone());
        expressions(&b.0, &mut set).expect("parses")
    }

    #[test]
    fn counters_and_set_ids_do_not_count_but_set_keys_do() {
        let rule = Rule {
            stmts: vec![
                Stmt::PortNotIn {
                    proto: crate::nft::model::Proto::Tcp,
                    ports: vec![53, 15008],
                },
                Stmt::CtState(CtState::RelatedEstablished),
                Stmt::Counter,
                Stmt::Return,
            ],
        };
        let keys = vec![
            53u16.to_be_bytes().to_vec(),
            15008u16.to_be_bytes().to_vec(),
        ];
        let ours = canonical(&rule, keys.clone());
        assert_eq!(
            ours.iter()
                .filter(|(n, f)| n == "counter" && f.is_empty())
                .count(),
            1
        );
        assert_eq!(canonical(&rule, keys.clone()), ours);
        assert_ne!(
            canonical(&rule, vec![keys[0].clone()]),
            ours,
            "set keys count"
        );

        // The kernel's dump of a counter carries its values, of a bitwise its (default) operation.
        let mut b = Buf(Vec::new());
        encode_rule(&mut b, &rule, &GroupFile(String::new()), &[7]).expect("encodes");
        let mut kernel = b.0.clone();
        let needle = [0u8; 8];
        let at = kernel
            .windows(8)
            .position(|w| w == needle)
            .expect("a zero counter value");
        kernel[at + 7] = 5;
        let mut set = |_: &str| Ok(keys.clone());
        assert_eq!(expressions(&kernel, &mut set).expect("parses"), ours);
    }

    #[test]
    fn different_rules_differ() {
        let a = Rule {
            stmts: vec![Stmt::Counter, Stmt::Jump("istio-output")],
        };
        let b = Rule {
            stmts: vec![Stmt::Counter, Stmt::Jump("istio-redirect")],
        };
        assert_ne!(canonical(&a, vec![]), canonical(&b, vec![]));
        assert_ne!(
            canonical(&a, vec![]),
            canonical(
                &Rule {
                    stmts: vec![Stmt::Counter, Stmt::Return]
                },
                vec![]
            )
        );
    }
}
