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
    pub allowed_hosts: Vec<String>,
}

/// The cookie the dashboard keeps a token in.
pub const TOKEN_COOKIE: &str = "memscope_token";

impl Access {
    /// From `--api-token` entries (`TOKEN` or `write:TOKEN` give write, `read:TOKEN` read), the
    /// tokens file's lines (`write TOKEN`, `read TOKEN`, `#` comments) and `--allowed-host`.
    pub fn new(
        api_tokens: &[String],
        tokens_file: Option<&str>,
        allowed_hosts: &[String],
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
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (role, token) = match line.split_once(char::is_whitespace) {
                Some(("read", t)) => (Role::Read, t),
                Some(("write", t)) => (Role::Write, t),
                _ => anyhow::bail!(
                    "tokens file line {}: expected `read TOKEN` or `write TOKEN`",
                    n + 1
                ),
            };
            tokens.push((role, token.trim().to_string()));
        }
        if let Some((_, short)) = tokens.iter().find(|(_, t)| t.len() < 16) {
            anyhow::bail!(
                "API token {:?}… is too short: use at least 16 characters (e.g. `openssl rand -hex 16`)",
                short.chars().take(3).collect::<String>()
            );
        }
        Ok(Access {
            tokens,
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        })
    }

    /// Whether writes need a token.
    pub fn guards_writes(&self) -> bool {
        self.tokens.iter().any(|(r, _)| *r == Role::Write)
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

    pub fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|h| *h == host)
    }
}

/// Compares without stopping at the first difference (no timing hint of how much matched).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    }

    #[test]
    fn roles_come_from_entries_and_the_file() {
        let a = Access::new(
            &["0123456789abcdef".into(), "read:fedcba9876543210".into()],
            Some("# ops\nwrite aaaaaaaaaaaaaaaa\n"),
            &[],
        )
        .unwrap();
        assert_eq!(a.role_of("0123456789abcdef"), Some(Role::Write));
        assert_eq!(a.role_of("fedcba9876543210"), Some(Role::Read));
        assert_eq!(a.role_of("aaaaaaaaaaaaaaaa"), Some(Role::Write));
        assert_eq!(a.role_of("nope"), None);
        assert!(Access::new(&["short".into()], None, &[]).is_err());
        assert!(Access::new(&[], Some("admin x"), &[]).is_err());
    }
}
