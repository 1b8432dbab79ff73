//! Where `fetch_url` may connect: public addresses only, unless the workspace says
//! `allow_private_addresses`. Loopback, private (RFC 1918, IPv6 unique local), link-local
//! (the cloud metadata service at 169.254.169.254 and fd00:ec2::254 among them), carrier
//! NAT, unspecified, multicast, broadcast and reserved addresses are refused, also inside
//! IPv4-mapped, NAT64 and 6to4 IPv6 addresses.
//!
//! Three places check, so no path around them remains: the first URL and every redirect
//! (an address written in the URL: [`check_url`], from the redirect policy), and every
//! name the client resolves ([`GuardedResolver`], which hands the connector only the
//! addresses that passed, so what was checked is what is connected to). Proxies are off
//! (a proxy would resolve names itself).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs as _};
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{Attempt, Policy};

/// Why `ip` may not be fetched from, or `None` if it is a public address.
pub(crate) fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

/// [`forbidden`] for IPv4.
fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        return Some("the cloud metadata service");
    }
    match (a, b) {
        (0, _) => Some("an unspecified (\"this network\") address"),
        (127, _) => Some("a loopback address"),
        (10, _) | (192, 168) => Some("a private (RFC 1918) address"),
        (172, 16..=31) => Some("a private (RFC 1918) address"),
        (169, 254) => Some("a link-local address"),
        (100, 64..=127) => Some("a carrier-grade NAT (shared) address"),
        (192, 0) if c == 0 => Some("an IETF protocol address"),
        (224..=239, _) => Some("a multicast address"),
        (240..=255, _) if [a, b, c, d] == [255; 4] => Some("the broadcast address"),
        (240..=255, _) => Some("a reserved address"),
        _ => None,
    }
}

/// [`forbidden`] for IPv6 (IPv4 inside it is checked as IPv4).
fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some("the cloud metadata service");
    }
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    let s = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return forbidden_v4(v4);
    }
    match s[0] {
        0xfc00..=0xfdff => Some("a private (unique local) address"),
        0xfe80..=0xfebf => Some("a link-local address"),
        0xfec0..=0xfeff => Some("a site-local address"),
        0xff00..=0xffff => Some("a multicast address"),
        _ => None,
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:AABB:CCDD::`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// The words of a refusal of `address` (reached for `what`).
fn refusal(what: &str, address: IpAddr, why: &str) -> String {
    format!(
        "{what} is {address}, {why}: fetch_url only reaches public addresses unless the \
         workspace config says `allow_private_addresses = true` under `[workspace]`"
    )
}

/// Checks a URL the client is about to request (the first, or a redirect's target): its
/// scheme is http or https, and an address written in it is allowed. Names are checked
/// when they are resolved ([`GuardedResolver`]).
pub(crate) fn check_url(url: &Url, allow_private: bool) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{url}: only http and https URLs can be fetched, not {}:",
            url.scheme()
        ));
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err(format!("{url} names no host")),
    };
    match forbidden(ip) {
        Some(why) if !allow_private => Err(refusal(&format!("the host of {url}"), ip, why)),
        _ => Ok(()),
    }
}

/// The addresses of `name` that may be connected to; an error when none may.
pub(crate) fn allowed_addresses(
    name: &str,
    addresses: Vec<SocketAddr>,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, String> {
    if allow_private {
        return Ok(addresses);
    }
    let mut refused = None;
    let allowed: Vec<SocketAddr> = addresses
        .into_iter()
        .filter(|a| match forbidden(a.ip()) {
            Some(why) => {
                refused.get_or_insert((a.ip(), why));
                false
            }
            None => true,
        })
        .collect();
    match (allowed.is_empty(), refused) {
        (false, _) => Ok(allowed),
        (true, Some((ip, why))) => Err(refusal(&format!("the name {name}"), ip, why)),
        (true, None) => Err(format!("the name {name} has no address")),
    }
}

/// A resolver that gives the connector only allowed addresses (system resolution, then
/// [`allowed_addresses`]). Resolution blocks the client's own runtime thread, which
/// serves this one request.
pub(crate) struct GuardedResolver {
    /// `[workspace] allow_private_addresses`.
    pub(crate) allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let result = (host.as_str(), 0)
            .to_socket_addrs()
            .map_err(|e| format!("could not resolve {host}: {e}"))
            .and_then(|found| allowed_addresses(&host, found.collect(), self.allow_private));
        Box::pin(std::future::ready(match result {
            Ok(addresses) => Ok(Box::new(addresses.into_iter()) as Addrs),
            Err(message) => Err(message.into()),
        }))
    }
}

/// What the redirect policy decides for the hop to `next`, when `visited` URLs were
/// requested already (the first one and every redirect followed).
pub(crate) fn redirect_decision(
    next: &Url,
    visited: usize,
    max: usize,
    allow_private: bool,
) -> Result<(), String> {
    if visited > max {
        return Err(format!(
            "more than {max} redirects (the next one to {next}); fetch the last URL \
             directly if it is the one you want"
        ));
    }
    check_url(next, allow_private).map_err(|e| format!("a redirect was refused: {e}"))
}

/// The redirect policy: at most `max` hops, each checked by [`redirect_decision`] and
/// recorded in `hops`.
pub(crate) fn redirect_policy(
    max: usize,
    allow_private: bool,
    hops: Arc<Mutex<Vec<String>>>,
) -> Policy {
    Policy::custom(move |attempt: Attempt<'_>| {
        match redirect_decision(attempt.url(), attempt.previous().len(), max, allow_private) {
            Ok(()) => {
                hops.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(attempt.url().to_string());
                attempt.follow()
            }
            Err(message) => attempt.error(message),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    /// The resolver's future, which is ready at once.
    fn ready(mut future: Resolving) -> Result<Addrs, String> {
        use std::task::{Context, Poll, Waker};
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(result) => result.map_err(|e| e.to_string()),
            Poll::Pending => panic!("the resolver's future was not ready"),
        }
    }

    #[test]
    fn private_and_special_addresses_are_forbidden_and_public_ones_not() {
        for bad in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:0a00:0001::1",
        ] {
            assert!(forbidden(ip(bad)).is_some(), "{bad} allowed");
        }
        for good in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "93.184.216.34",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(forbidden(ip(good)), None, "{good} refused");
        }
        assert_eq!(
            forbidden(ip("169.254.169.254")),
            Some("the cloud metadata service")
        );
        assert_eq!(
            forbidden(ip("fd00:ec2::254")),
            Some("the cloud metadata service")
        );
    }

    #[test]
    fn urls_with_forbidden_addresses_or_schemes_are_refused() {
        let url = |s: &str| Url::parse(s).expect("url");
        assert!(check_url(&url("https://example.com/x"), false).is_ok());
        assert!(check_url(&url("http://8.8.8.8/"), false).is_ok());
        let e = check_url(&url("http://127.0.0.1:8080/"), false).expect_err("loopback");
        assert!(
            e.contains("loopback") && e.contains("allow_private_addresses"),
            "{e}"
        );
        assert!(check_url(&url("http://[::ffff:10.0.0.1]/"), false).is_err());
        assert!(check_url(&url("http://127.0.0.1/"), true).is_ok());
        let e = check_url(&url("file:///etc/passwd"), true).expect_err("file");
        assert!(e.contains("only http and https"), "{e}");
    }

    #[test]
    fn a_name_is_kept_to_its_public_addresses_and_refused_with_none() {
        let a = |s: &str| SocketAddr::new(ip(s), 0);
        let mixed = vec![a("10.0.0.5"), a("93.184.216.34")];
        assert_eq!(
            allowed_addresses("mixed.example", mixed.clone(), false).expect("public one"),
            vec![a("93.184.216.34")]
        );
        assert_eq!(
            allowed_addresses("mixed.example", mixed.clone(), true).expect("all"),
            mixed
        );
        let e = allowed_addresses("metadata.example", vec![a("169.254.169.254")], false)
            .expect_err("metadata");
        assert!(
            e.contains("metadata.example") && e.contains("metadata service"),
            "{e}"
        );
    }

    #[test]
    fn the_resolver_refuses_a_name_that_resolves_to_loopback() {
        let resolver = GuardedResolver {
            allow_private: false,
        };
        let name: Name = "localhost".parse().expect("name");
        let result = ready(resolver.resolve(name));
        let e = result.err().expect("localhost refused");
        assert!(e.contains("localhost") && e.contains("loopback"), "{e}");
        let open = GuardedResolver {
            allow_private: true,
        };
        let name: Name = "localhost".parse().expect("name");
        let found: Vec<SocketAddr> = ready(open.resolve(name)).expect("allowed").collect();
        assert!(found.iter().all(|a| a.ip().is_loopback()), "{found:?}");
    }

    #[test]
    fn a_redirect_from_a_public_host_to_a_private_address_is_refused() {
        let next = Url::parse("http://169.254.169.254/latest/meta-data/").expect("url");
        let e = redirect_decision(&next, 1, 5, false).expect_err("refused");
        assert!(
            e.contains("redirect was refused") && e.contains("metadata"),
            "{e}"
        );
        assert!(redirect_decision(&next, 1, 5, true).is_ok());
        let public = Url::parse("https://example.org/").expect("url");
        assert!(redirect_decision(&public, 5, 5, false).is_ok());
        let e = redirect_decision(&public, 6, 5, false).expect_err("too many");
        assert!(e.contains("more than 5 redirects"), "{e}");
    }
}
