//! `--native-nftables` end to end: parity with Istio's nftables goldens, and real runs.
//!
//! Parity, for every row of `testdata/istio/nftables/cases.tsv`, each in fresh network namespaces:
//! the golden loaded with `nft -f` in one; (a) our `--native-nftables --dry-run` output loaded with
//! `nft -f` in a second; (b) a real `--native-nftables` run in a third, with `nft`, `iptables*`,
//! `ip6tables*` and `ip` made unavailable to it. The three must give the same `nft -s list ruleset` and
//! the same `nft --debug=netlink list ruleset` (the bytecode) once rule handles and anonymous set
//! numbers are normalised. The same `nft` binary lists every side, so its version cannot matter.
//!

use std::process::{Command, Output, Stdio};

use anyhow::{ensure, Context as _, Result};
use e2e::interception::{
    app_outbound_bypasses_the_proxy, app_outbound_is_captured,
    dns_to_the_configured_server_lands_on_15053,
    inbound_lands_on_15006_and_an_excluded_port_does_not, ipv6_outbound_and_inbound_are_redirected,
    outbound_of_the_app_is_redirected_and_the_proxy_s_is_not,
    the_excluded_cidr_and_port_bypass_the_proxy, tproxy_inbound_reaches_a_transparent_listener,
    DNS_TO_THE_PEER, EXCLUDED_CIDR, EXCLUDED_PORT,
};
use e2e::iptables_init::{init, init_ok};
use e2e::netns::{NetNs, Pair, MASK_NETFILTER_TOOLS as MASKED};
use e2e::nettool::PROXY_UID;
use test_support::corpus::{load_run_cases, nftables_dir, RunCase};
use test_support::groups::ensure_groups;
use test_support::istio_init::injected_args_with;

/// Panics unless root with `nft` and `ip` installed: these tests never skip.
fn require_root_and_nft() {
    test_support::root::require_root_with(&["nft", "ip"], "install nftables and iproute2");
}

/// A fresh namespace with `lo` up; panics when it cannot be made.
fn new_ns(prefix: &str) -> NetNs {
    NetNs::new(prefix).expect("netns")
}

/// Loads `text` into `ns` with `nft -f`.
fn nft_load(ns: &NetNs, text: &str) -> Result<()> {
    let file = std::env::temp_dir().join(format!("nft-load-{}.nft", ns.name()));
    std::fs::write(&file, text)?;
    let r = ns.run(&["nft", "-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    r.map(|_| ())
}

/// The two views of the ruleset of `ns` the comparison uses.
fn ruleset_views(ns: &NetNs) -> Result<(String, String)> {
    let list = ns.run(&["nft", "-s", "list", "ruleset"])?;
    let netlink = normalise_netlink(&ns.run(&["nft", "--debug=netlink", "list", "ruleset"])?);
    Ok((list, netlink))
}

/// `nft --debug=netlink` output with rule handles (`inet T C <handle> [<prev>]`) cut, anonymous set
/// numbers (`__setN`) unified (both change between otherwise identical loads) and counter values
/// dropped (they count traffic; `nft -s` leaves them out too).
fn normalise_netlink(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let line = if matches!(words.first(), Some(&"inet" | &"ip" | &"ip6"))
            && (words.len() == 4 || words.len() == 5)
            && words[3..]
                .iter()
                .all(|w| w.bytes().all(|b| b.is_ascii_digit()))
        {
            words[..3].join(" ")
        } else {
            line.to_string()
        };
        // Counter values are traffic, not ruleset.
        let line = match (line.find("[ counter pkts "), line.find("counter packets ")) {
            (Some(i), _) => format!("{}[ counter ]", &line[..i]),
            (None, Some(i)) => {
                let tail = line[i..].splitn(6, ' ').nth(5).unwrap_or_default();
                format!("{}counter {tail}", &line[..i])
            }
            (None, None) => line,
        };
        let mut rest = line.as_str();
        while let Some(i) = rest.find("__set") {
            out.push_str(&rest[..i + 5]);
            rest = rest[i + 5..].trim_start_matches(|c: char| c.is_ascii_digit());
            out.push('N');
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}

/// The rows of `testdata/istio/nftables/cases.tsv`.
fn read_cases() -> Vec<RunCase> {
    load_run_cases(&nftables_dir()).expect("cases.tsv")
}

/// Each case of cases.tsv through `check`; every failure is reported, `what` names the check.
fn every_case(what: &str, check: fn(&RunCase) -> Result<()>) {
    require_root_and_nft();
    let cases = read_cases();
    assert_eq!(cases.len(), 16, "cases.tsv rows");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| check(c).err().map(|e| format!("{}: {e:#}", c.name)))
        .collect();
    eprintln!(
        "nftables {what} parity: {}/{} cases equal",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `iptables-init <case args> --native-nftables <extra>` with only the case's environment.
fn ours(case: &RunCase, extra: &[&str]) -> Command {
    let mut cmd = Command::new(e2e::bin("iptables-init"));
    cmd.args(&case.args)
        .arg("--native-nftables")
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(case.env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// The transaction part of a dry run (the `#` route lines dropped).
fn transaction_of(dry_run: &str) -> String {
    dry_run
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn compare(what: &str, ours: &(String, String), golden: &(String, String)) -> Result<()> {
    ensure!(
        ours.0 == golden.0,
        "{what}: `nft -s list ruleset` differs\n--- ours\n{}\n--- golden\n{}",
        ours.0,
        golden.0
    );
    ensure!(
        ours.1 == golden.1,
        "{what}: normalised `nft --debug=netlink list ruleset` differs\n--- ours\n{}\n--- golden\n{}",
        ours.1,
        golden.1
    );
    Ok(())
}

fn dry_run_case(case: &RunCase) -> Result<()> {
    ensure_groups(case.named_groups())?;
    let golden = case.golden_text(&nftables_dir())?;
    let record =
        std::env::temp_dir().join(format!("nft-record-{}-{}", std::process::id(), case.name));
    let out = ours(case, &["--dry-run"])
        .env("DRY_RUN_FILE_PATH", &record)
        .output()?;
    ensure!(
        out.status.success(),
        "dry run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recorded = std::fs::read_to_string(&record);
    let _ = std::fs::remove_file(&record);
    ensure!(
        recorded? == golden,
        "DRY_RUN_FILE_PATH does not hold the golden's text"
    );
    let text = transaction_of(&String::from_utf8(out.stdout)?);
    // The printed transaction is Istio's golden text itself.
    ensure!(
        text == golden,
        "dry-run text differs from the golden:\n{text}"
    );
    let g = new_ns(&format!("nftg-{}", case.name));
    nft_load(&g, &golden).context("loading the golden")?;
    let o = new_ns(&format!("nfto-{}", case.name));
    nft_load(&o, &text).context("loading our dry run")?;
    let gv = ruleset_views(&g)?;
    ensure!(
        gv.0.contains("table inet istio-proxy-nat"),
        "the golden loaded nothing"
    );
    compare("dry run", &ruleset_views(&o)?, &gv)
}

#[test]
fn parity_dry_run_loaded_with_nft_equals_every_golden() {
    every_case("dry-run", dry_run_case);
}

/// A command that runs `argv` in `ns` inside a private mount namespace in which every tool of
/// [`MASKED`] is `/bin/false`; the sandbox first proves that `nft` and `ip` are gone.
fn sandboxed(ns: &NetNs, argv: &[String], env: &[(String, String)]) -> Command {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "set -e; {MASKED}; if nft --version || ip link >/dev/null || iptables -V || ip6tables -V; then echo 'a tool is still usable' >&2; exit 99; fi; exec {}",
        quoted.join(" ")
    );
    let mut cmd = ns.command("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// [`real_run`], which must succeed; `what` names the run in the failure.
fn real_ok(ns: &NetNs, case: &RunCase, extra: &[&str], what: &str) -> Output {
    let out = real_run(ns, case, extra).expect(what);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A real `--native-nftables` run of `case` (plus `extra`) in `ns`, with no userspace tool available.
fn real_run(ns: &NetNs, case: &RunCase, extra: &[&str]) -> Result<Output> {
    let mut argv = vec![e2e::bin("iptables-init").to_string_lossy().into_owned()];
    argv.extend(case.args.iter().cloned());
    argv.push("--native-nftables".into());
    argv.extend(extra.iter().map(|s| s.to_string()));
    let out = sandboxed(ns, &argv, &case.env).output()?;
    ensure!(
        out.status.code() != Some(99),
        "the sandbox left a tool usable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn real_case(case: &RunCase) -> Result<()> {
    ensure_groups(case.named_groups())?;
    let golden = case.golden_text(&nftables_dir())?;
    let g = new_ns(&format!("nftg-{}", case.name));
    nft_load(&g, &golden).context("loading the golden")?;
    let o = new_ns(&format!("nftr-{}", case.name));
    let out = real_run(&o, case, &[])?;
    ensure!(
        out.status.success(),
        "real run failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    compare("real run", &ruleset_views(&o)?, &ruleset_views(&g)?)?;
    // A second run finds everything in place and sends nothing: handles and counters stay.
    let before = o.run(&["nft", "-a", "list", "ruleset"])?;
    let again = real_run(&o, case, &[])?;
    let stderr = String::from_utf8_lossy(&again.stderr);
    ensure!(again.status.success(), "second run failed: {stderr}");
    ensure!(
        stderr.contains("already in place"),
        "the second run changed something: {stderr}"
    );
    ensure!(
        o.run(&["nft", "-a", "list", "ruleset"])? == before,
        "the second run changed the ruleset"
    );
    Ok(())
}

#[test]
fn parity_real_run_without_any_tool_equals_every_golden() {
    every_case("real-run", real_case);
}

fn case(name: &str) -> RunCase {
    read_cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("case in cases.tsv")
}

/// The `ip rule` and `ip -6 addr show dev lo` of `ns`: what the route actions touch.
fn routing(ns: &NetNs) -> String {
    let rules = ns.run(&["ip", "rule"]).unwrap_or_default()
        + &ns.run(&["ip", "-6", "rule"]).unwrap_or_default();
    let routes = ns
        .run(&[
            "ip", "route", "show", "table", "all", "type", "local", "dev", "lo",
        ])
        .unwrap_or_default();
    let addrs = ns
        .run(&["ip", "-6", "-o", "addr", "show", "dev", "lo"])
        .unwrap_or_default();
    let addrs: String = addrs
        .lines()
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    format!("{rules}{routes}{addrs}")
}

#[test]
fn rerun_changes_nothing_and_routes_are_not_duplicated() {
    require_root_and_nft();
    let c = case("tproxy");
    let ns = new_ns("nft-rerun");
    real_ok(&ns, &c, &[], "first run");
    let (views, routes) = (ruleset_views(&ns).expect("views"), routing(&ns));
    assert!(routes.contains("fwmark 0x539 lookup 133"), "{routes}");
    assert!(routes.contains("::6/128"), "{routes}");
    let handles = ns.run(&["nft", "-a", "list", "ruleset"]).expect("list");
    real_ok(&ns, &c, &[], "second run");
    assert_eq!(
        ruleset_views(&ns).expect("views"),
        views,
        "a rerun changed the ruleset"
    );
    assert_eq!(
        ns.run(&["nft", "-a", "list", "ruleset"]).expect("list"),
        handles,
        "a rerun re-created rules"
    );
    // A rule someone added to one of our chains makes the next run re-create the tables exactly.
    ns.run(&[
        "nft",
        "add",
        "rule",
        "inet",
        "istio-proxy-nat",
        "istio-output",
        "tcp",
        "dport",
        "4242",
        "accept",
    ])
    .expect("foreign rule");
    real_ok(&ns, &c, &[], "third run");
    assert_eq!(
        ruleset_views(&ns).expect("views"),
        views,
        "the foreign rule survived"
    );
    // So does --force-apply, even with nothing to change.
    let forced = real_run(&ns, &c, &["--force-apply"]).expect("forced run");
    assert!(String::from_utf8_lossy(&forced.stderr).contains("ruleset applied"));
    assert_eq!(ruleset_views(&ns).expect("views"), views);
    assert_eq!(routing(&ns), routes, "a rerun changed the routing");
    assert_eq!(
        routes.matches("fwmark 0x539").count(),
        2,
        "one v4 and one v6 rule: {routes}"
    );
}

#[test]
fn a_smaller_configuration_leaves_no_stale_table() {
    require_root_and_nft();
    let ns = new_ns("nft-shrink");
    real_ok(&ns, &case("tproxy"), &[], "tproxy run");
    let list = ruleset_views(&ns).expect("views").0;
    assert!(
        list.contains("istio-proxy-mangle") && list.contains("istio-proxy-raw"),
        "{list}"
    );
    // Without --reconcile too: the tables are re-created every run.
    real_ok(&ns, &case("empty"), &[], "empty run");
    let fresh = new_ns("nft-shrink-fresh");
    real_ok(&fresh, &case("empty"), &[], "fresh run");
    assert_eq!(
        ruleset_views(&ns).expect("views"),
        ruleset_views(&fresh).expect("views"),
        "state differs from a fresh run"
    );
    let list = ruleset_views(&ns).expect("views").0;
    assert!(
        !list.contains("istio-proxy-mangle") && !list.contains("istio-proxy-raw"),
        "{list}"
    );
}

#[test]
fn cleanup_only_removes_our_tables_and_routes_and_nothing_else() {
    require_root_and_nft();
    let ns = new_ns("nft-clean");
    nft_load(&ns, "add table inet foreign\nadd chain inet foreign c { type filter hook output priority 0 ; }\nadd rule inet foreign c counter accept\n")
        .expect("foreign table");
    ns.run(&["ip", "rule", "add", "fwmark", "7", "lookup", "77"])
        .expect("foreign rule");
    let before = (ruleset_views(&ns).expect("views"), routing(&ns));
    let c = case("tproxy");
    real_ok(&ns, &c, &[], "run");
    real_ok(&ns, &c, &["--cleanup-only"], "cleanup");
    let after = ruleset_views(&ns).expect("views");
    assert_eq!(
        after, before.0,
        "cleanup left or removed something in nf_tables"
    );
    let routes = routing(&ns);
    assert!(!routes.contains("0x539"), "{routes}");
    assert!(routes.contains("fwmark 0x7 lookup 77"), "{routes}");
    // Cleanup of an empty namespace succeeds too.
    let empty = new_ns("nft-clean-empty");
    real_ok(&empty, &c, &["--cleanup-only"], "cleanup");
    assert_eq!(ruleset_views(&empty).expect("views").0, "");
}

#[test]
fn a_batch_refused_midway_leaves_the_namespace_as_it_was() {
    require_root_and_nft();
    let ns = new_ns("nft-fail");
    real_ok(&ns, &case("empty"), &[], "first run");
    // A table of the same name owned by another process: nf_tables refuses our delete of it, a
    // message near the end of the batch.
    let mut holder = ns
        .command("nft")
        .arg("-i")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nft -i");
    {
        use std::io::Write as _;
        let stdin = holder.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"add table inet istio-proxy-raw { flags owner ; }\n")
            .expect("write");
        stdin.flush().expect("flush");
    }
    let deadline = std::time::Instant::now() + e2e::PATIENCE;
    while !ns
        .run(&["nft", "list", "tables"])
        .unwrap_or_default()
        .contains("istio-proxy-raw")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the owned table never appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = (ruleset_views(&ns).expect("views"), routing(&ns));
    let out = real_run(&ns, &case("tproxy"), &[]).expect("failing run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let after = (ruleset_views(&ns).expect("views"), routing(&ns));
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("add table inet istio-proxy-raw`: EPERM"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    // The routes (::6, the fwmark rules, the local routes) went in before the batch and were taken back.
    assert_eq!(after, before, "the failed run changed something");
}

#[test]
fn without_cap_net_admin_nothing_is_touched() {
    require_root_and_nft();
    let ns = new_ns("nft-cap");
    let c = case("tproxy");
    let mut argv = vec![
        "setpriv".to_string(),
        "--inh-caps=-all".into(),
        "--bounding-set=-net_admin".into(),
    ];
    argv.push(e2e::bin("iptables-init").to_string_lossy().into_owned());
    argv.extend(c.args.iter().cloned());
    argv.push("--native-nftables".into());
    let out = sandboxed(&ns, &argv, &c.env).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("CAP_NET_ADMIN"), "{stderr}");
    assert_eq!(ruleset_views(&ns).expect("views").0, "");
    assert!(!routing(&ns).contains("::6/128"));
}

#[test]
fn normaliser_cuts_handles_and_set_numbers() {
    let s =
        "inet istio-proxy-nat istio-output 17 15\n  [ lookup reg 1 set __set12 0x1 ]\ninet t c 4\n  [ counter pkts 3 bytes 180 ]\n\t\tcounter packets 3 bytes 180 accept\n";
    assert_eq!(
        normalise_netlink(s),
        "inet istio-proxy-nat istio-output\n  [ lookup reg 1 set __setN 0x1 ]\ninet t c\n  [ counter ]\n\t\tcounter accept\n"
    );
    assert_ne!(
        normalise_netlink("[ cmp eq reg 1 0x1 ]"),
        normalise_netlink("[ cmp eq reg 1 0x2 ]")
    );
}

// Real traffic: rules applied with `--native-nftables` in the pod of an `e2e::netns::Pair`, then the
// checks of `e2e::interception`, which the iptables backend's tests make too.

/// Istio's injected arguments (hello.yaml) with the value of each `replace` flag replaced, then
/// `--native-nftables` and `extra`.
fn native(replace: &[(&str, &'static str)], extra: &[&'static str]) -> Vec<&'static str> {
    injected_args_with(replace, &[&["--native-nftables"][..], extra].concat())
}

/// The injected arguments without `--native-nftables`, then `extra`.
fn with_iptables(extra: &[&'static str]) -> Vec<&'static str> {
    injected_args_with(&[], extra)
}

/// The injected arguments with `--native-nftables`, then `extra`.
fn with(extra: &[&'static str]) -> Vec<&'static str> {
    native(&[], extra)
}

/// The pod/peer pair of a test, once root and the tools are checked.
fn pair(name: &str) -> Pair {
    require_root_and_nft();
    Pair::new(name)
}

#[test]
fn traffic_outbound_goes_to_15001_with_its_original_destination_and_the_proxy_uid_is_not_redirected(
) {
    let p = pair("nft-a");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    outbound_of_the_app_is_redirected_and_the_proxy_s_is_not(&p);

    // After --cleanup-only nothing is captured any more.
    init_ok(&p.pod, &with(&["--ipv6", "false", "--cleanup-only"]));
    app_outbound_bypasses_the_proxy(&p, "10.10.0.2:8080", "10.10.0.2:8080");
}

#[test]
fn traffic_inbound_goes_to_15006_and_an_excluded_port_does_not() {
    let p = pair("nft-b");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    inbound_lands_on_15006_and_an_excluded_port_does_not(&p);
}

#[test]
fn traffic_excluded_outbound_cidr_and_port_bypass_the_proxy() {
    let p = pair("nft-c");
    init_ok(&p.pod, &native(EXCLUDED_CIDR, EXCLUDED_PORT));
    the_excluded_cidr_and_port_bypass_the_proxy(&p);
}

#[test]
fn traffic_dns_to_the_configured_server_goes_to_15053() {
    let p = pair("nft-d");
    init_ok(&p.pod, &with(DNS_TO_THE_PEER));
    dns_to_the_configured_server_lands_on_15053(&p);
}

/// A namespace that already holds the other backend's rules gets a warning (both rule sets would see
/// every packet); a fresh one does not.
#[test]
fn the_other_backends_rules_are_warned_about() {
    require_root_and_nft();
    let warned = |out: &std::process::Output, what: &str| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).contains(what)
    };
    let iptables_nft = with_iptables(&["--ipv6", "false", "--force-iptables-binary", "nft"]);
    let native = with(&["--ipv6", "false"]);

    let ns = new_ns("nft-mix-a");
    assert!(!warned(&init(&ns, &iptables_nft), "also holds"));
    assert!(warned(
        &init(&ns, &native),
        "also holds istio-iptables rules (iptables-nft: ip nat ISTIO_INBOUND)"
    ));

    let ns = new_ns("nft-mix-b");
    assert!(!warned(&init(&ns, &native), "also holds"));
    assert!(warned(
        &init(&ns, &iptables_nft),
        "also holds the tables of --native-nftables (inet istio-proxy-nat)"
    ));
}

/// DNS capture whose only server is IPv6 while IPv6 is off: Istio's transaction jumps to chains it never
/// creates and the kernel refuses it whole; ours applies, and the app's TCP is still captured.
#[test]
fn dns_capture_with_only_an_ipv6_server_and_ipv6_off_applies() {
    let p = pair("nft-dns6");
    init_ok(
        &p.pod,
        &with(&[
            "--ipv6",
            "false",
            "--redirect-dns",
            "--dns-servers",
            "fd00::53",
        ]),
    );
    app_outbound_is_captured(&p.pod);
}

#[test]
fn traffic_tproxy_inbound_reaches_a_transparent_listener_and_a_rerun_changes_nothing() {
    let p = pair("nft-e");
    let args = native(&[("-m", "TPROXY")], &["--ipv6", "false"]);
    init_ok(&p.pod, &args);
    tproxy_inbound_reaches_a_transparent_listener(&p);

    // The counters have counted the connection; a rerun leaves them (and the handles) as they are.
    let listing = |ns: &NetNs| ns.run(&["nft", "-a", "list", "ruleset"]).expect("list");
    let before = (listing(&p.pod), routing(&p.pod));
    assert!(
        !before.0.contains("istio-tproxy") || before.0.contains("packets 1 "),
        "{}",
        before.0
    );
    init_ok(&p.pod, &args);
    assert_eq!(
        (listing(&p.pod), routing(&p.pod)),
        before,
        "a rerun changed something"
    );
}

#[test]
fn traffic_ipv6_outbound_and_inbound() {
    let p = pair("nft-f");
    init_ok(&p.pod, &with(&["--ipv6", "true"]));
    ipv6_outbound_and_inbound_are_redirected(&p);
}

#[test]
fn run_validation_passes_after_a_native_apply() {
    require_root_and_nft();
    for (ipv6, probe) in [("false", "127.0.0.6:15002"), ("true", "[::6]:15002")] {
        // One run that applies and validates, as the proxy uid with CAP_NET_ADMIN (the probe is only
        // captured for the proxy uid).
        let ns = new_ns("nft-val");
        let u = PROXY_UID.to_string();
        let out = ns
            .command("setpriv")
            .args([
                "--reuid",
                &u,
                "--regid",
                &u,
                "--clear-groups",
                "--inh-caps=+net_admin",
                "--ambient-caps=+net_admin",
            ])
            .arg(e2e::bin("iptables-init"))
            .args(with(&[
                "--ipv6",
                ipv6,
                "--run-validation",
                // Ends at the first redirected probe: a generous bound for a busy machine.
                "--probe-timeout=60s",
            ]))
            .stdin(Stdio::null())
            .output()
            .expect("validation run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains(probe), "{err}");
        assert!(ruleset_views(&ns)
            .expect("views")
            .0
            .contains("istio-proxy-nat"));
        // Without the rules the same validation fails with 126.
        init_ok(&ns, &with(&["--ipv6", ipv6, "--cleanup-only"]));
        let out = ns
            .command("setpriv")
            .args(["--reuid", &u, "--regid", &u, "--clear-groups"])
            .arg(e2e::bin("iptables-init"))
            .args(with(&[
                "--ipv6",
                ipv6,
                "--run-validation",
                "--skip-rule-apply",
                "--probe-timeout=1s",
            ]))
            .stdin(Stdio::null())
            .output()
            .expect("validation run");
        assert_eq!(
            out.status.code(),
            Some(126),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Configurations beyond the public goldens (partial-byte and `/0` prefixes, capture-all DNS, `-o`/`-q`
/// ports, TPROXY variants, empty `-b`, a batch beyond the default socket buffers): a real run gives what `nft -f` makes of our own dry run, so
/// the encoder compiles every statement as nft does.
#[test]
fn real_runs_equal_nft_compiling_our_dry_run_beyond_the_goldens() {
    require_root_and_nft();
    let configs: &[&[&str]] = &[
        &["-u", "1337", "-m", "TPROXY", "-b", "", "--ipv6", "true"],
        &["-u", "1337", "-b", ",", "--ipv6", "false"],
        &[
            "-u",
            "1337",
            "--redirect-dns",
            "--capture-all-dns",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-o",
            "9090,9091",
            "-q",
            "80,443",
            "-i",
            "*",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-i",
            "10.16.0.0/12,2001:db8::/33",
            "-x",
            "0.0.0.0/0,10.0.0.1/31,::/0",
            "-k",
            "eth0",
            "--ipv6",
            "true",
        ],
        &["-u", "1337", "-i", "127.0.0.1/32", "--ipv6", "false"],
        &[
            "-u",
            "1337,1338",
            "-g",
            "1337",
            "-m",
            "TPROXY",
            "-b",
            "80,81",
            "-c",
            "eth9",
            "--drop-invalid",
            "-t",
            "7",
            "-r",
            "70",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-b",
            "*",
            "-d",
            "15090,15021",
            "-m",
            "TPROXY",
            "--redirect-dns",
            "--dns-servers",
            "10.0.0.10,fd00::10",
            "-k",
            "eth1",
            "-i",
            "*",
            "--ipv6",
            "true",
        ],
    ];
    let mut all: Vec<Vec<String>> = configs
        .iter()
        .map(|a| a.iter().map(|s| s.to_string()).collect())
        .collect();
    // A batch larger than the default socket buffers (about 1500 messages).
    let many: Vec<String> = (0..1500)
        .map(|i| format!("10.{}.{}.0/24", i / 250, i % 250))
        .collect();
    all.push(
        ["-u", "1337", "-i", "*", "--ipv6", "false", "-x"]
            .iter()
            .map(|s| s.to_string())
            .chain([many.join(",")])
            .collect(),
    );
    let mut failures = Vec::new();
    for args in &all {
        let case = RunCase {
            name: "extra".into(),
            args: args.clone(),
            env: Vec::new(),
        };
        let result = (|| -> Result<()> {
            let out = ours(&case, &["--dry-run"]).output()?;
            ensure!(
                out.status.success(),
                "dry run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = transaction_of(&String::from_utf8(out.stdout)?);
            let d = new_ns("nftx-d");
            nft_load(&d, &text).context("nft -f of our dry run")?;
            let r = new_ns("nftx-r");
            let out = real_run(&r, &case, &[])?;
            ensure!(
                out.status.success(),
                "real run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            compare(
                "real run vs nft -f of the dry run",
                &ruleset_views(&r)?,
                &ruleset_views(&d)?,
            )
        })();
        if let Err(e) = result {
            let shown: Vec<&str> = args
                .iter()
                .map(|a| if a.len() > 80 { &a[..80] } else { a })
                .collect();
            failures.push(format!("{shown:?}: {e:#}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
