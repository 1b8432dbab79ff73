//! Where `fetch_url` may connect: public addresses only. Refused are this machine's own
//! addresses (every address of every interface, read with `getifaddrs` at each check) and
//! every range of the IANA IPv4 and IPv6 Special-Purpose Address Registries, with IPv4
//! multicast, IPv6 multicast and the deprecated IPv6 site-local and IPv4-compatible
//! ranges; the IPv4 address inside an IPv4-mapped, NAT64 (`64:ff9b::/96`) or 6to4 address
//! is checked as IPv4 (and with it, whether it is this machine's).
//!
//! `[workspace] allow_private_addresses = true` opens the ranges of local networks and of
//! this machine ([`Reach::Local`]): loopback, private-use (RFC 1918), shared (carrier-grade
//! NAT), link-local (the cloud metadata service among them), IPv6 unique local and
//! site-local, and this machine's own addresses. It does not open the ranges that are no
//! destination for a fetch ([`Reach::Never`]): "this network", documentation,
//! benchmarking, IETF protocol assignments, AS112, AMT, the 6to4 relay anycast, reserved,
//! broadcast and multicast, discard-only, Teredo, local-use NAT64, SRv6 SIDs.
//!
//! Three places check, so no path around them remains: the first URL and every redirect
//! (an address written in the URL: [`check_url`], from the redirect policy), and every
//! name the client resolves ([`GuardedResolver`], which hands the connector only the
//! addresses that passed, so what was checked is what is connected to and no second
//! resolution happens). Proxies are off (a proxy would resolve names itself).

use std::ffi::CStr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs as _};
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{Attempt, Policy};

/// Why the guard refused a URL, a name or a redirect; the text is what the model reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuardError {
    /// Not an http or https URL.
    #[error("{url}: only http and https URLs can be fetched, not {}:", url.scheme())]
    Scheme {
        /// The URL.
        url: Url,
    },
    /// A URL without a host.
    #[error("{url} names no host")]
    NoHost {
        /// The URL.
        url: Url,
    },
    /// Every address of `what` was refused.
    #[error("{}", refusal_text(what, refusals, *allow_private))]
    Refused {
        /// What was refused ("the host of URL", "the name N (every address ...)").
        what: String,
        /// Why, address by address.
        refusals: Vec<Refusal>,
        /// `[workspace] allow_private_addresses`, for the hint.
        allow_private: bool,
    },
    /// A name that resolved to no address.
    #[error("the name {name} has no address")]
    NoAddress {
        /// The name.
        name: String,
    },
    /// A name that could not be resolved.
    #[error("could not resolve {host}: {source}")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's error.
        source: std::io::Error,
    },
    /// This machine's addresses could not be listed, so nothing can be checked.
    #[error("could not list this machine's addresses (getifaddrs): {0}")]
    Interfaces(#[source] std::io::Error),
    /// Too many redirects.
    #[error(
        "more than {max} redirects (the next one to {next}); fetch the last URL directly if \
         it is the one you want"
    )]
    TooManyRedirects {
        /// The most followed.
        max: usize,
        /// Where the next one led.
        next: Url,
    },
    /// A redirect's target was refused.
    #[error("a redirect was refused: {0}")]
    Redirect(#[source] Box<GuardError>),
}

/// Whether `[workspace] allow_private_addresses` opens a special range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// A local network or this machine: opened by `allow_private_addresses`.
    Local,
    /// No destination for a fetch: never reached.
    Never,
}

/// A special-purpose range an address is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Special {
    /// The range's first address.
    net: IpAddr,
    /// The range's prefix length.
    len: u8,
    /// What the range is ("documentation (TEST-NET-2)").
    pub(crate) what: &'static str,
    /// Whether `allow_private_addresses` opens it.
    pub(crate) reach: Reach,
}

impl Special {
    /// The range as CIDR text ("198.51.100.0/24").
    pub(crate) fn range(&self) -> String {
        format!("{}/{}", self.net, self.len)
    }
}

/// One row of a range table: first address, prefix length, what it is, who may reach it.
type Row<A> = (A, u8, &'static str, Reach);

/// The IPv4 special ranges (IANA IPv4 Special-Purpose Address Registry, and multicast),
/// a more specific range before the one it is inside.
const V4_RANGES: &[Row<Ipv4Addr>] = &[
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "\"this network\" (RFC 791)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(10, 0, 0, 0),
        8,
        "private-use (RFC 1918)",
        Reach::Local,
    ),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared address space (carrier-grade NAT, RFC 6598)",
        Reach::Local,
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback", Reach::Local),
    (
        Ipv4Addr::new(169, 254, 169, 254),
        32,
        "the cloud metadata service (link-local)",
        Reach::Local,
    ),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "link-local",
        Reach::Local,
    ),
    (
        Ipv4Addr::new(172, 16, 0, 0),
        12,
        "private-use (RFC 1918)",
        Reach::Local,
    ),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "IETF protocol assignments",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "documentation (TEST-NET-1)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(192, 31, 196, 0),
        24,
        "AS112-v4 (RFC 7535)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(192, 52, 193, 0),
        24,
        "AMT (RFC 7450)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "the deprecated 6to4 relay anycast (RFC 7526)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(192, 168, 0, 0),
        16,
        "private-use (RFC 1918)",
        Reach::Local,
    ),
    (
        Ipv4Addr::new(192, 175, 48, 0),
        24,
        "direct delegation AS112 service (RFC 7534)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(198, 18, 0, 0),
        15,
        "benchmarking (RFC 2544)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation (TEST-NET-2)",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation (TEST-NET-3)",
        Reach::Never,
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast", Reach::Never),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "limited broadcast",
        Reach::Never,
    ),
    (
        Ipv4Addr::new(240, 0, 0, 0),
        4,
        "reserved (RFC 1112)",
        Reach::Never,
    ),
];

/// The IPv6 special ranges (IANA IPv6 Special-Purpose Address Registry, multicast and the
/// deprecated site-local and IPv4-compatible ranges), a more specific range before the
/// one it is inside. IPv4-mapped, NAT64 (`64:ff9b::/96`) and 6to4 addresses are checked by
/// the IPv4 address inside them ([`embedded_v4`]) before this table.
const V6_RANGES: &[Row<Ipv6Addr>] = &[
    (Ipv6Addr::UNSPECIFIED, 128, "unspecified", Reach::Never),
    (Ipv6Addr::LOCALHOST, 128, "loopback", Reach::Local),
    (
        Ipv6Addr::UNSPECIFIED,
        96,
        "IPv4-compatible (deprecated, RFC 4291)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "local-use IPv4/IPv6 translation (RFC 8215)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "discard-only (RFC 6666)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0),
        64,
        "the dummy IPv6 prefix (RFC 9780)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        "Teredo (RFC 4380)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        "benchmarking (RFC 5180)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments (RFC 2928)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation (RFC 3849)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0),
        48,
        "direct delegation AS112 service (RFC 7534)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation (RFC 9637)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0),
        16,
        "segment routing (SRv6) SIDs (RFC 9602)",
        Reach::Never,
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        128,
        "the cloud metadata service (unique local)",
        Reach::Local,
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique local (RFC 4193)",
        Reach::Local,
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        "link-local",
        Reach::Local,
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "site-local (deprecated, RFC 3879)",
        Reach::Local,
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        "multicast",
        Reach::Never,
    ),
];

/// Everything outside 2000::/3 that the table does not name: reserved by the IETF in the
/// IPv6 Address Space registry, no global unicast address.
const V6_OUTSIDE_GLOBAL: Special = Special {
    net: IpAddr::V6(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0)),
    len: 3,
    what: "reserved by the IETF: outside the global unicast space",
    reach: Reach::Never,
};

/// Whether `ip` is in the `len`-bit prefix of `net` (as integers of `bits` bits).
fn in_prefix(ip: u128, net: u128, len: u8, bits: u32) -> bool {
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    ip >> shift == net >> shift
}

/// The special range an IPv4 address is in, if any.
fn special_v4(ip: Ipv4Addr) -> Option<Special> {
    let value = u128::from(u32::from(ip));
    V4_RANGES
        .iter()
        .find(|(net, len, _, _)| in_prefix(value, u128::from(u32::from(*net)), *len, 32))
        .map(|&(net, len, what, reach)| Special {
            net: IpAddr::V4(net),
            len,
            what,
            reach,
        })
}

/// The special range an IPv6 address (not one with IPv4 inside) is in, if any.
fn special_v6(ip: Ipv6Addr) -> Option<Special> {
    let value = u128::from(ip);
    let named = V6_RANGES
        .iter()
        .find(|(net, len, _, _)| in_prefix(value, u128::from(*net), *len, 128))
        .map(|&(net, len, what, reach)| Special {
            net: IpAddr::V6(net),
            len,
            what,
            reach,
        });
    match named {
        Some(special) => Some(special),
        None if ip.segments()[0] & 0xe000 != 0x2000 => Some(V6_OUTSIDE_GLOBAL),
        None => None,
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`)
/// or 6to4 (`2002:AABB:CCDD::/48`) address, with the words for the kind.
fn embedded_v4(ip: Ipv6Addr) -> Option<(&'static str, Ipv4Addr)> {
    let v4 = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(("an IPv4-mapped", v4(hi, lo))),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(("a NAT64 (64:ff9b::/96)", v4(hi, lo))),
        [0x2002, hi, lo, ..] => Some(("a 6to4 (2002::/16)", v4(hi, lo))),
        _ => None,
    }
}

/// This machine's addresses, each with its interface's name.
#[derive(Debug, Clone, Default)]
pub(crate) struct LocalAddresses(Vec<(IpAddr, String)>);

impl LocalAddresses {
    /// Every address of every interface, now (`getifaddrs`).
    pub(crate) fn read() -> Result<LocalAddresses, GuardError> {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        // SAFETY: `head` is a valid place for the list's head; on success the list is ours
        // until `freeifaddrs`.
        if unsafe { libc::getifaddrs(&mut head) } != 0 {
            return Err(GuardError::Interfaces(std::io::Error::last_os_error()));
        }
        let mut found = Vec::new();
        let mut node = head;
        while !node.is_null() {
            // SAFETY: `node` is an entry of the list getifaddrs returned, not freed yet.
            let entry = unsafe { &*node };
            // SAFETY: `ifa_addr` is null or points to a socket address of the list.
            if let Some(ip) = unsafe { socket_ip(entry.ifa_addr) } {
                let name = if entry.ifa_name.is_null() {
                    "?".to_owned()
                } else {
                    // SAFETY: a non-null `ifa_name` is a NUL-terminated string of the list.
                    unsafe { CStr::from_ptr(entry.ifa_name) }
                        .to_string_lossy()
                        .into_owned()
                };
                found.push((ip, name));
            }
            node = entry.ifa_next;
        }
        // SAFETY: `head` came from getifaddrs and is freed once; nothing of it is kept.
        unsafe { libc::freeifaddrs(head) };
        Ok(LocalAddresses(found))
    }

    /// What a check needs: nothing when private addresses are allowed (this machine's
    /// addresses are opened by that), else [`LocalAddresses::read`].
    pub(crate) fn for_check(allow_private: bool) -> Result<LocalAddresses, GuardError> {
        if allow_private {
            Ok(LocalAddresses::default())
        } else {
            LocalAddresses::read()
        }
    }

    /// The interface `ip` belongs to, if it is this machine's.
    fn interface_of(&self, ip: IpAddr) -> Option<&str> {
        self.0
            .iter()
            .find(|(own, _)| *own == ip)
            .map(|(_, name)| name.as_str())
    }

    /// The addresses and their interfaces.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[(IpAddr, String)] {
        &self.0
    }
}

/// The IP address of a socket address from getifaddrs (IPv4 or IPv6; others `None`).
///
/// # Safety
///
/// `address` is null or points to a valid `sockaddr` whose family says its full type.
unsafe fn socket_ip(address: *const libc::sockaddr) -> Option<IpAddr> {
    if address.is_null() {
        return None;
    }
    // SAFETY: non-null and valid, as the caller promises.
    let family = i32::from(unsafe { (*address).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a `sockaddr_in`.
            let v4 = unsafe { std::ptr::read_unaligned(address.cast::<libc::sockaddr_in>()) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a `sockaddr_in6`.
            let v6 = unsafe { std::ptr::read_unaligned(address.cast::<libc::sockaddr_in6>()) };
            Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Why an address may not be fetched from: it is in a special range, this machine's, or
/// both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The address as resolved or written.
    address: IpAddr,
    /// The IPv4 address inside it (and the kind of embedding), which was checked.
    embedded: Option<(&'static str, Ipv4Addr)>,
    /// The interface it is an address of, if it is this machine's.
    interface: Option<String>,
    /// The special range it is in.
    pub(crate) special: Option<Special>,
}

impl Refusal {
    /// Whether `allow_private_addresses` opens the address.
    pub(crate) fn opened_by_allow(&self) -> bool {
        self.special.is_none_or(|s| s.reach == Reach::Local)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some((kind, v4)) => write!(f, "{} is {kind} address of {v4}, which", self.address)?,
            None => write!(f, "{}", self.address)?,
        }
        if let Some(interface) = &self.interface {
            write!(f, " is an address of this machine (interface {interface})")?;
            if self.special.is_some() {
                f.write_str(" and")?;
            }
        }
        if let Some(special) = &self.special {
            write!(f, " is in {}, {}", special.range(), special.what)?;
        }
        Ok(())
    }
}

/// Why `ip` may not be fetched from (whatever the opt-in), or `None` if it is a public
/// address and not this machine's.
pub(crate) fn classify(ip: IpAddr, local: &LocalAddresses) -> Option<Refusal> {
    let embedded = match ip {
        IpAddr::V6(v6) => embedded_v4(v6),
        IpAddr::V4(_) => None,
    };
    let subject = embedded.map_or(ip, |(_, v4)| IpAddr::V4(v4));
    let special = match subject {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    };
    let interface = local
        .interface_of(subject)
        .or_else(|| local.interface_of(ip))
        .map(str::to_owned);
    if special.is_none() && interface.is_none() {
        return None;
    }
    Some(Refusal {
        address: ip,
        embedded,
        interface,
        special,
    })
}

/// Checks one address: refused when [`classify`] says so and the opt-in does not open it.
pub(crate) fn check_ip(
    ip: IpAddr,
    local: &LocalAddresses,
    allow_private: bool,
) -> Result<(), Refusal> {
    match classify(ip, local) {
        Some(refusal) if !(allow_private && refusal.opened_by_allow()) => Err(refusal),
        _ => Ok(()),
    }
}

/// The words of a refusal of `what` (the host of a URL, a name) for `refusals`.
fn refusal_text(what: &str, refusals: &[Refusal], allow_private: bool) -> String {
    let reasons: Vec<String> = refusals.iter().map(Refusal::to_string).collect();
    let hint = if !allow_private && refusals.iter().any(Refusal::opened_by_allow) {
        "fetch_url only reaches public addresses that are not this machine's, unless the \
         workspace config says `allow_private_addresses = true` under `[workspace]` (which \
         opens local networks and this machine)"
    } else {
        "fetch_url never reaches such an address: it is no destination for a fetch, and \
         `allow_private_addresses` does not open it"
    };
    format!("{what} is refused: {}; {hint}", reasons.join("; "))
}

/// Checks a URL the client is about to request (the first, or a redirect's target): its
/// scheme is http or https, and an address written in it is allowed. Names are checked
/// when they are resolved ([`GuardedResolver`]).
pub(crate) fn check_url(url: &Url, allow_private: bool) -> Result<(), GuardError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(GuardError::Scheme { url: url.clone() });
    }
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err(GuardError::NoHost { url: url.clone() }),
    };
    let local = LocalAddresses::for_check(allow_private)?;
    check_ip(ip, &local, allow_private).map_err(|refusal| GuardError::Refused {
        what: format!("the host of {url}"),
        refusals: vec![refusal],
        allow_private,
    })
}

/// The addresses of `name` that may be connected to (each one checked); an error naming
/// every refused one when none may.
pub(crate) fn allowed_addresses(
    name: &str,
    addresses: Vec<SocketAddr>,
    allow_private: bool,
    local: &LocalAddresses,
) -> Result<Vec<SocketAddr>, GuardError> {
    let mut refused: Vec<Refusal> = Vec::new();
    let mut allowed = Vec::new();
    for address in addresses {
        match check_ip(address.ip(), local, allow_private) {
            Ok(()) => allowed.push(address),
            Err(refusal) => {
                if !refused.contains(&refusal) {
                    refused.push(refusal);
                }
            }
        }
    }
    if !allowed.is_empty() {
        return Ok(allowed);
    }
    if refused.is_empty() {
        return Err(GuardError::NoAddress {
            name: name.to_owned(),
        });
    }
    Err(GuardError::Refused {
        what: format!("the name {name} (every address it resolves to)"),
        refusals: refused,
        allow_private,
    })
}

/// A resolver that gives the connector only allowed addresses (system resolution, this
/// machine's addresses read, then [`allowed_addresses`]). Resolution blocks the client's
/// own runtime thread, which serves this one request.
pub(crate) struct GuardedResolver {
    /// `[workspace] allow_private_addresses`.
    pub(crate) allow_private: bool,
}

impl GuardedResolver {
    /// Resolves `host` and keeps the allowed addresses.
    fn addresses(&self, host: &str) -> Result<Vec<SocketAddr>, GuardError> {
        let found: Vec<SocketAddr> = (host, 0)
            .to_socket_addrs()
            .map_err(|source| GuardError::Resolve {
                host: host.to_owned(),
                source,
            })?
            .collect();
        let local = LocalAddresses::for_check(self.allow_private)?;
        allowed_addresses(host, found, self.allow_private, &local)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let result = self.addresses(name.as_str());
        Box::pin(std::future::ready(match result {
            Ok(addresses) => Ok(Box::new(addresses.into_iter()) as Addrs),
            Err(error) => Err(Box::new(error) as Box<dyn std::error::Error + Send + Sync>),
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
) -> Result<(), GuardError> {
    if visited > max {
        return Err(GuardError::TooManyRedirects {
            max,
            next: next.clone(),
        });
    }
    check_url(next, allow_private).map_err(|e| GuardError::Redirect(Box::new(e)))
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
            Err(error) => attempt.error(error),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    /// No local addresses: the ranges alone.
    fn none() -> LocalAddresses {
        LocalAddresses::default()
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

    use Reach::{Local, Never};

    /// Every special range: its first and last address (and a few inside), the range it is
    /// reported in, and whether the opt-in opens it.
    const SPECIAL: &[(&str, &str, Reach)] = &[
        ("0.0.0.0", "0.0.0.0/8", Never),
        ("0.255.255.255", "0.0.0.0/8", Never),
        ("10.0.0.0", "10.0.0.0/8", Local),
        ("10.255.255.255", "10.0.0.0/8", Local),
        ("100.64.0.0", "100.64.0.0/10", Local),
        ("100.127.255.255", "100.64.0.0/10", Local),
        ("127.0.0.0", "127.0.0.0/8", Local),
        ("127.0.0.1", "127.0.0.0/8", Local),
        ("127.255.255.255", "127.0.0.0/8", Local),
        ("169.254.0.0", "169.254.0.0/16", Local),
        ("169.254.169.253", "169.254.0.0/16", Local),
        ("169.254.169.254", "169.254.169.254/32", Local),
        ("169.254.255.255", "169.254.0.0/16", Local),
        ("172.16.0.0", "172.16.0.0/12", Local),
        ("172.31.255.255", "172.16.0.0/12", Local),
        ("192.0.0.0", "192.0.0.0/24", Never),
        ("192.0.0.255", "192.0.0.0/24", Never),
        ("192.0.2.0", "192.0.2.0/24", Never),
        ("192.0.2.255", "192.0.2.0/24", Never),
        ("192.31.196.0", "192.31.196.0/24", Never),
        ("192.31.196.255", "192.31.196.0/24", Never),
        ("192.52.193.0", "192.52.193.0/24", Never),
        ("192.52.193.255", "192.52.193.0/24", Never),
        ("192.88.99.0", "192.88.99.0/24", Never),
        ("192.88.99.255", "192.88.99.0/24", Never),
        ("192.168.0.0", "192.168.0.0/16", Local),
        ("192.168.255.255", "192.168.0.0/16", Local),
        ("192.175.48.0", "192.175.48.0/24", Never),
        ("192.175.48.255", "192.175.48.0/24", Never),
        ("198.18.0.0", "198.18.0.0/15", Never),
        ("198.19.255.255", "198.18.0.0/15", Never),
        ("198.51.100.0", "198.51.100.0/24", Never),
        ("198.51.100.255", "198.51.100.0/24", Never),
        ("203.0.113.0", "203.0.113.0/24", Never),
        ("203.0.113.255", "203.0.113.0/24", Never),
        ("224.0.0.0", "224.0.0.0/4", Never),
        ("239.255.255.255", "224.0.0.0/4", Never),
        ("240.0.0.0", "240.0.0.0/4", Never),
        ("255.255.255.254", "240.0.0.0/4", Never),
        ("255.255.255.255", "255.255.255.255/32", Never),
        ("::", "::/128", Never),
        ("::1", "::1/128", Local),
        ("::2", "::/96", Never),
        ("::ffff:ffff", "::/96", Never),
        ("::1.2.3.4", "::/96", Never),
        ("64:ff9b:1::", "64:ff9b:1::/48", Never),
        (
            "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
            "64:ff9b:1::/48",
            Never,
        ),
        ("100::", "100::/64", Never),
        ("100::ffff:ffff:ffff:ffff", "100::/64", Never),
        ("100:0:0:1::", "100:0:0:1::/64", Never),
        ("2001::", "2001::/32", Never),
        ("2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/32", Never),
        ("2001:1::1", "2001::/23", Never),
        ("2001:2::", "2001:2::/48", Never),
        ("2001:2:0:ffff:ffff:ffff:ffff:ffff", "2001:2::/48", Never),
        ("2001:3::1", "2001::/23", Never),
        ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001::/23", Never),
        ("2001:db8::", "2001:db8::/32", Never),
        (
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:db8::/32",
            Never,
        ),
        ("2620:4f:8000::", "2620:4f:8000::/48", Never),
        (
            "2620:4f:8000:ffff:ffff:ffff:ffff:ffff",
            "2620:4f:8000::/48",
            Never,
        ),
        ("3fff::", "3fff::/20", Never),
        ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff::/20", Never),
        ("5f00::", "5f00::/16", Never),
        (
            "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "5f00::/16",
            Never,
        ),
        ("fc00::", "fc00::/7", Local),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fc00::/7", Local),
        ("fd00:ec2::254", "fd00:ec2::254/128", Local),
        ("fe80::", "fe80::/10", Local),
        (
            "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "fe80::/10",
            Local,
        ),
        ("fec0::", "fec0::/10", Local),
        (
            "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "fec0::/10",
            Local,
        ),
        ("ff00::", "ff00::/8", Never),
        ("ff02::1", "ff00::/8", Never),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::/8", Never),
        // Outside 2000::/3 and not named above.
        ("1::1", "2000::/3", Never),
        ("4000::1", "2000::/3", Never),
        ("::ffff:0:1.2.3.4", "2000::/3", Never),
        // IPv4 inside IPv6: the IPv4 address's range.
        ("::ffff:0.0.0.0", "0.0.0.0/8", Never),
        ("::ffff:127.0.0.1", "127.0.0.0/8", Local),
        ("::ffff:10.0.0.1", "10.0.0.0/8", Local),
        ("::ffff:169.254.169.254", "169.254.169.254/32", Local),
        ("::ffff:198.51.100.7", "198.51.100.0/24", Never),
        ("::ffff:255.255.255.255", "255.255.255.255/32", Never),
        ("64:ff9b::", "0.0.0.0/8", Never),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254/32", Local),
        ("64:ff9b::c000:201", "192.0.2.0/24", Never),
        ("64:ff9b::ffff:ffff", "255.255.255.255/32", Never),
        ("2002::", "0.0.0.0/8", Never),
        ("2002:a00:1::1", "10.0.0.0/8", Local),
        ("2002:c633:6407::1", "198.51.100.0/24", Never),
        (
            "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "255.255.255.255/32",
            Never,
        ),
    ];

    /// Public addresses, many just outside a special range.
    const PUBLIC: &[&str] = &[
        "1.0.0.0",
        "1.1.1.1",
        "8.8.8.8",
        "9.255.255.255",
        "11.0.0.0",
        "93.184.216.34",
        "100.63.255.255",
        "100.128.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "191.255.255.255",
        "192.0.1.0",
        "192.0.3.0",
        "192.31.195.255",
        "192.31.197.0",
        "192.52.192.255",
        "192.52.194.0",
        "192.88.98.255",
        "192.88.100.0",
        "192.167.255.255",
        "192.169.0.0",
        "192.175.47.255",
        "192.175.49.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "223.255.255.255",
        "2000::",
        "2001:200::",
        "2001:4860:4860::8888",
        "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
        "2001:db9::",
        "2003::1",
        "2606:4700::1111",
        "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
        "2620:4f:8001::",
        "3ffe:ffff::1",
        "3fff:1000::",
        "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        "::ffff:1.1.1.1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "64:ff9b::101:101",
        "2002:808:808::1",
    ];

    #[test]
    fn every_special_range_is_classified_at_its_edges_and_public_addresses_are_not() {
        for &(address, range, reach) in SPECIAL {
            let refusal = classify(ip(address), &none()).unwrap_or_else(|| {
                panic!("{address} is allowed, but is in {range}");
            });
            let special = refusal.special.expect("a range");
            assert_eq!(
                (special.range(), special.reach),
                (range.to_owned(), reach),
                "{address}"
            );
            assert_eq!(
                check_ip(ip(address), &none(), true).is_ok(),
                reach == Local,
                "{address} with the opt-in"
            );
            assert!(check_ip(ip(address), &none(), false).is_err(), "{address}");
        }
        for &address in PUBLIC {
            assert_eq!(classify(ip(address), &none()), None, "{address} refused");
            assert!(check_ip(ip(address), &none(), false).is_ok(), "{address}");
        }
    }

    #[test]
    fn refusals_name_the_address_the_range_and_the_interface() {
        let text = |s: &str| classify(ip(s), &none()).expect("refused").to_string();
        assert_eq!(
            text("198.51.100.7"),
            "198.51.100.7 is in 198.51.100.0/24, documentation (TEST-NET-2)"
        );
        assert_eq!(
            text("::ffff:10.0.0.5"),
            "::ffff:10.0.0.5 is an IPv4-mapped address of 10.0.0.5, which is in 10.0.0.0/8, \
             private-use (RFC 1918)"
        );
        assert_eq!(
            text("169.254.169.254"),
            "169.254.169.254 is in 169.254.169.254/32, the cloud metadata service (link-local)"
        );
        let local = LocalAddresses(vec![
            (ip("10.0.0.5"), "eth0".to_owned()),
            (ip("93.184.216.34"), "eth1".to_owned()),
            (ip("2606:4700::1111"), "eth1".to_owned()),
        ]);
        let refusal = classify(ip("10.0.0.5"), &local).expect("own");
        assert_eq!(
            refusal.to_string(),
            "10.0.0.5 is an address of this machine (interface eth0) and is in 10.0.0.0/8, \
             private-use (RFC 1918)"
        );
        // A public address of this machine: refused, and opened by the opt-in.
        let refusal = classify(ip("93.184.216.34"), &local).expect("own");
        assert_eq!(
            refusal.to_string(),
            "93.184.216.34 is an address of this machine (interface eth1)"
        );
        assert!(check_ip(ip("93.184.216.34"), &local, false).is_err());
        assert!(check_ip(ip("93.184.216.34"), &local, true).is_ok());
        assert!(check_ip(ip("2606:4700::1111"), &local, false).is_err());
        // Inside IPv6 too.
        let e = check_ip(ip("::ffff:93.184.216.34"), &local, false).expect_err("own");
        assert!(e.to_string().contains("interface eth1"), "{e}");
        let e = check_ip(ip("2002:5db8:d822::1"), &local, false).expect_err("own");
        assert!(e.to_string().contains("interface eth1"), "{e}");
    }

    #[test]
    fn this_machines_addresses_are_read_with_their_interfaces() {
        let local = LocalAddresses::read().expect("getifaddrs");
        let loopback = local
            .entries()
            .iter()
            .find(|(a, _)| *a == ip("127.0.0.1"))
            .expect("127.0.0.1 is an address of this machine");
        assert!(!loopback.1.is_empty(), "{loopback:?}");
        // Every address of this machine is refused.
        for (address, name) in local.entries() {
            let e = check_ip(*address, &local, false).expect_err("own address");
            assert!(e.to_string().contains(&format!("interface {name}")), "{e}");
        }
    }

    #[test]
    fn urls_with_forbidden_addresses_or_schemes_are_refused() {
        let url = |s: &str| Url::parse(s).expect("url");
        assert!(check_url(&url("https://example.com/x"), false).is_ok());
        assert!(check_url(&url("http://8.8.8.8/"), false).is_ok());
        let e = check_url(&url("http://127.0.0.1:8080/"), false)
            .expect_err("loopback")
            .to_string();
        assert!(
            e.contains("loopback") && e.contains("allow_private_addresses = true"),
            "{e}"
        );
        assert!(check_url(&url("http://[::ffff:10.0.0.1]/"), false).is_err());
        assert!(check_url(&url("http://127.0.0.1/"), true).is_ok());
        let e = check_url(&url("http://198.51.100.7/"), true)
            .expect_err("documentation")
            .to_string();
        assert!(
            e.contains("198.51.100.7 is in 198.51.100.0/24, documentation (TEST-NET-2)")
                && e.contains("does not open it"),
            "{e}"
        );
        let e = check_url(&url("file:///etc/passwd"), true)
            .expect_err("file")
            .to_string();
        assert!(e.contains("only http and https"), "{e}");
    }

    #[test]
    fn a_name_is_kept_to_its_public_addresses_and_refused_with_none() {
        let a = |s: &str| SocketAddr::new(ip(s), 0);
        let mixed = vec![a("10.0.0.5"), a("93.184.216.34"), a("192.0.2.1")];
        assert_eq!(
            allowed_addresses("mixed.example", mixed.clone(), false, &none()).expect("public"),
            vec![a("93.184.216.34")]
        );
        assert_eq!(
            allowed_addresses("mixed.example", mixed, true, &none()).expect("opened"),
            vec![a("10.0.0.5"), a("93.184.216.34")]
        );
        let e = allowed_addresses(
            "metadata.example",
            vec![a("169.254.169.254"), a("fd00:ec2::254")],
            false,
            &none(),
        )
        .expect_err("metadata")
        .to_string();
        assert!(
            e.contains("metadata.example")
                && e.contains("169.254.169.254 is in")
                && e.contains("fd00:ec2::254 is in")
                && e.contains("metadata service"),
            "{e}"
        );
        let e = allowed_addresses("docs.example", vec![a("203.0.113.9")], true, &none())
            .expect_err("documentation")
            .to_string();
        assert!(
            e.contains("203.0.113.0/24, documentation (TEST-NET-3)"),
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
        let e = redirect_decision(&next, 1, 5, false)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("redirect was refused") && e.contains("metadata"),
            "{e}"
        );
        assert!(redirect_decision(&next, 1, 5, true).is_ok());
        let next = Url::parse("http://[2001:db8::1]/").expect("url");
        assert!(redirect_decision(&next, 1, 5, true).is_err());
        let public = Url::parse("https://example.org/").expect("url");
        assert!(redirect_decision(&public, 5, 5, false).is_ok());
        let e = redirect_decision(&public, 6, 5, false)
            .expect_err("too many")
            .to_string();
        assert!(e.contains("more than 5 redirects"), "{e}");
    }
}
