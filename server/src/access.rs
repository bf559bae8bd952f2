//! The access settings (issue 13, finding 8): API tokens with their roles and the host names the
//! server answers for, parsed from the flags. What a request may do with them is decided in
//! `http::access`, the middleware; this module stands apart so the configuration and the state
//! that hold it need not import the HTTP layer.

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Read,
    Write,
}

/// The access settings, parsed from the flags.
#[derive(Debug, Clone, Default)]
pub struct Access {
    tokens: Vec<(Role, String)>,
    pub hosts: HostRule,
    /// Collector tokens, `(NAME, TOKEN)`: NAME is the one host the token speaks for.
    collectors: Vec<(String, String)>,
}

/// The shortest token accepted, API or collector (`openssl rand -hex 16` gives 32).
pub const MIN_TOKEN_CHARS: usize = 16;

/// Which `Host` names this server answers for: what stops a page from rebinding its DNS name to
/// this server's address and reading it with the user's browser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HostRule {
    /// Any (a server on a public address with no `--allowed-host`: a rebinding page could only
    /// reach what anyone can reach already).
    #[default]
    Any,
    /// Bound to loopback with no `--allowed-host`: `localhost`, `127.0.0.1` and `[::1]` only, as
    /// Jupyter does, since every page the user opens can reach this address. A request with no
    /// `Host` (not from a browser: browsers always send one) is answered.
    Loopback,
    /// `--allowed-host`: these names only (lower-case, without ports).
    Listed(Vec<String>),
}

/// The names a loopback server answers for by default.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl HostRule {
    /// From `--allowed-host` and whether the server listens on a loopback address.
    pub fn new(allowed_hosts: &[String], bound_to_loopback: bool) -> HostRule {
        let listed: Vec<String> = allowed_hosts
            .iter()
            .map(|h| host_name(h))
            .filter(|h| !h.is_empty())
            .collect();
        match (listed.is_empty(), bound_to_loopback) {
            (false, _) => HostRule::Listed(listed),
            (true, true) => HostRule::Loopback,
            (true, false) => HostRule::Any,
        }
    }

    /// Whether a request for `host` (the `Host` header's name, port aside; `None` if absent) is
    /// answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        match self {
            HostRule::Any => true,
            HostRule::Loopback => host.is_none_or(|h| LOOPBACK_NAMES.contains(&h)),
            HostRule::Listed(names) => host.is_some_and(|h| names.iter().any(|n| n == h)),
        }
    }

    /// The names answered for, to say so in a refusal.
    pub fn describe(&self) -> String {
        match self {
            HostRule::Any => "any host".into(),
            HostRule::Loopback => format!(
                "{} only (it listens on loopback; name others with --allowed-host)",
                LOOPBACK_NAMES.join(", ")
            ),
            HostRule::Listed(names) => format!("{} only (--allowed-host)", names.join(", ")),
        }
    }
}

/// The cookie the dashboard's token is kept in, for the server on `port`: set by the server
/// (`POST /api/session`), HttpOnly, and named per port, since browsers send a host's cookies to
/// all its ports (a page served on another port of the host cannot read it, nor have it taken as
/// this server's token).
pub fn token_cookie(port: u16) -> String {
    format!("memscope_token_{port}")
}

impl Access {
    /// From `--api-token` entries (`TOKEN` or `write:TOKEN` give write, `read:TOKEN` read), the
    /// tokens file's lines (`write TOKEN`, `read TOKEN`, `#` comments, also after a token) and
    /// the host rule.
    pub fn new(
        api_tokens: &[String],
        tokens_file: Option<&str>,
        hosts: HostRule,
    ) -> anyhow::Result<Access> {
        let mut tokens = Vec::new();
        for entry in api_tokens {
            let (role, token) = match entry.split_once(':') {
                Some(("read", t)) => (Role::Read, t),
                Some(("write", t)) => (Role::Write, t),
                _ => (Role::Write, entry.as_str()),
            };
            tokens.push((role, token.trim().to_string()));
        }
        for (n, line) in tokens_file.unwrap_or("").lines().enumerate() {
            // A `#` at the start of a line or after a space starts a comment (a token has no
            // spaces, so `write TOKEN # ops` is the token TOKEN).
            let line = match line.find(" #").or(line.find("\t#")) {
                Some(at) => &line[..at],
                None => line,
            };
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let role = match words[..] {
                ["read", _] => Role::Read,
                ["write", _] => Role::Write,
                _ => anyhow::bail!(
                    "tokens file line {}: expected `read TOKEN` or `write TOKEN` (a comment starts with #)",
                    n + 1
                ),
            };
            tokens.push((role, words[1].to_string()));
        }
        if let Some((_, short)) = tokens.iter().find(|(_, t)| t.len() < MIN_TOKEN_CHARS) {
            anyhow::bail!(
                "API token {:?}… is too short: use at least {MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 16`)",
                short.chars().take(3).collect::<String>()
            );
        }
        Ok(Access {
            tokens,
            hosts,
            collectors: Vec::new(),
        })
    }

    /// With the collector tokens of `--collector-token NAME=TOKEN`: each NAME once (it is the
    /// host its token speaks for), each TOKEN at least [`MIN_TOKEN_CHARS`] long and used once.
    pub fn with_collectors(mut self, entries: &[String]) -> anyhow::Result<Access> {
        for entry in entries {
            let Some((name, token)) = entry.split_once('=') else {
                anyhow::bail!("--collector-token {entry:?}: expected NAME=TOKEN");
            };
            let (name, token) = (name.trim(), token.trim());
            if name.is_empty() || name.chars().any(char::is_control) {
                anyhow::bail!(
                    "--collector-token: the NAME before `=` must be a host name (no control characters)"
                );
            }
            if token.len() < MIN_TOKEN_CHARS {
                anyhow::bail!(
                    "the collector token of {name:?} is too short: use at least {MIN_TOKEN_CHARS} characters \
                     (e.g. `openssl rand -hex 16`)"
                );
            }
            if self.collectors.iter().any(|(n, _)| n == name) {
                anyhow::bail!(
                    "--collector-token names {name:?} twice: one token per host (a token speaks for the host it is named for)"
                );
            }
            if self.collectors.iter().any(|(_, t)| t == token) {
                anyhow::bail!(
                    "--collector-token: {name:?} has the same token as another name; give each host its own"
                );
            }
            self.collectors.push((name.to_string(), token.to_string()));
        }
        Ok(self)
    }

    /// The NAME of the collector token `presented`, if it is one (compared in constant time).
    pub fn collector_for_token(&self, presented: &str) -> Option<&str> {
        // Every entry is compared, so the time taken does not say which one matched.
        self.collectors.iter().fold(None, |found, (n, t)| {
            if same(t.as_bytes(), presented.as_bytes()) {
                Some(n.as_str())
            } else {
                found
            }
        })
    }

    /// The collector names that have a token (never the tokens).
    pub fn collector_names(&self) -> Vec<String> {
        self.collectors.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Whether writes need a token: with any token configured (a read token alone would
    /// otherwise leave uploads, renames and deletes open to anyone while reads are closed).
    pub fn guards_writes(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Whether reads need a token.
    pub fn guards_reads(&self) -> bool {
        self.tokens.iter().any(|(r, _)| *r == Role::Read)
    }

    /// The role of a presented token, if it is one.
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        self.tokens
            .iter()
            .filter(|(_, t)| same(t.as_bytes(), presented.as_bytes()))
            .map(|(r, _)| *r)
            .max()
    }
}

/// Compares without stopping at the first difference (no timing hint of how much matched).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The port of `host[:port]` (`default` when none is named).
pub fn host_port(authority: &str, default: u16) -> u16 {
    let a = authority.trim();
    let port = match a.strip_prefix('[') {
        Some(rest) => rest.split_once("]:").map(|(_, p)| p),
        None => a.rsplit_once(':').map(|(_, p)| p),
    };
    port.and_then(|p| p.parse().ok()).unwrap_or(default)
}

/// `host[:port]` without the port, lower-cased.
pub fn host_name(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_string();
    }
    a.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(a.clone(), |(h, _)| h.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_drop_ports_and_brackets() {
        assert_eq!(host_name("Example.com:8080"), "example.com");
        assert_eq!(host_name("[::1]:8080"), "::1");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_port("Example.com:8080", 80), 8080);
        assert_eq!(host_port("[::1]:9", 80), 9);
        assert_eq!(host_port("[::1]", 80), 80);
        assert_eq!(host_port("localhost", 80), 80);
    }

    #[test]
    fn roles_come_from_entries_and_the_file() {
        let a = Access::new(
            &["0123456789abcdef".into(), "read:fedcba9876543210".into()],
            Some("# ops\nwrite aaaaaaaaaaaaaaaa\nread bbbbbbbbbbbbbbbb  # the dashboards' token\n"),
            HostRule::Any,
        )
        .unwrap();
        assert_eq!(a.role_of("0123456789abcdef"), Some(Role::Write));
        assert_eq!(a.role_of("fedcba9876543210"), Some(Role::Read));
        assert_eq!(a.role_of("aaaaaaaaaaaaaaaa"), Some(Role::Write));
        assert_eq!(a.role_of("bbbbbbbbbbbbbbbb"), Some(Role::Read));
        assert_eq!(a.role_of("nope"), None);
        assert!(Access::new(&["short".into()], None, HostRule::Any).is_err());
        assert!(Access::new(&[], Some("admin x"), HostRule::Any).is_err());
        assert!(Access::new(&[], Some("write a b"), HostRule::Any).is_err());
    }

    #[test]
    fn collector_tokens_are_long_and_one_per_host() {
        let ok = |e: &[&str]| {
            Access::default().with_collectors(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        let a = ok(&["gpu7=0123456789abcdef", "gpu8=fedcba9876543210"]).unwrap();
        assert_eq!(a.collector_for_token("fedcba9876543210"), Some("gpu8"));
        assert_eq!(a.collector_for_token("fedcba987654321"), None);
        assert!(ok(&["gpu7=short"]).is_err(), "too short");
        assert!(
            ok(&["gpu7=0123456789abcdef", "gpu7=fedcba9876543210"]).is_err(),
            "a host twice"
        );
        assert!(
            ok(&["gpu7=0123456789abcdef", "gpu8=0123456789abcdef"]).is_err(),
            "a token twice"
        );
        assert!(ok(&["0123456789abcdef"]).is_err(), "no name");
    }

    #[test]
    fn a_loopback_server_answers_for_loopback_names_only() {
        let rule = HostRule::new(&[], true);
        for ok in ["localhost", "127.0.0.1", "::1"] {
            assert!(rule.allows(Some(ok)), "{ok}");
        }
        assert!(rule.allows(None), "no Host: not a browser");
        assert!(!rule.allows(Some("rebound.example")));
        assert_eq!(HostRule::new(&[], false), HostRule::Any);
        let listed = HostRule::new(&["Memscope.internal:8080".into()], true);
        assert!(listed.allows(Some("memscope.internal")));
        assert!(!listed.allows(Some("localhost")));
        assert!(!listed.allows(None));
    }
}
