//! `[[mcp_servers]]`: the MCP servers whose tools a host serves beside its plugins', as
//! the file writes them and as they resolve (checked once, at load).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One `[[mcp_servers]]` entry as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMcpServer {
    /// What it is called in tool names (the prefix), status and the audit log.
    pub name: String,
    /// stdio: the program to start (found on `PATH` if it has no `/`).
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: its environment (besides `PATH`, `HOME`, `LANG` and `TMPDIR`, nothing of the
    /// host's reaches it).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: the folder it starts in (default: its own state folder).
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint's URL.
    pub url: Option<String>,
    /// Streamable HTTP: a bearer token sent as `Authorization: Bearer ...`.
    pub token: Option<String>,
    /// Streamable HTTP: the environment variable holding the bearer token.
    pub token_env: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// What its tools' names start with (default: the name and `_`).
    pub prefix: Option<String>,
    /// Which protocol generation to speak: `auto` (default: `server/discover`, falling
    /// back to `initialize` when the server is older), `2026-07-28` or `2025-11-25`.
    pub protocol: Option<String>,
    /// stdio: whether it may use the network (default false).
    #[serde(default)]
    pub network: bool,
    /// stdio: whether it may make Unix-domain sockets (default false).
    #[serde(default)]
    pub unix_sockets: bool,
    /// stdio: the memory all its processes may use, MiB (its cgroup's limit, where the
    /// host can make one; default: `[isolation] memory_limit_mb`).
    pub memory_mb: Option<u64>,
    /// stdio: the processes and threads it may have at once (its cgroup's `pids.max`;
    /// default: `[isolation] max_processes`).
    pub max_processes: Option<u64>,
    /// stdio: what it may read and run besides the system's folders and its program's.
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// stdio: what it may write besides its own state folder and temporary folder.
    #[serde(default)]
    pub write_paths: Vec<PathBuf>,
    /// Whether its tools' annotations may lower their risk (`readOnlyHint`; default
    /// false: MCP calls annotations untrusted unless the server is, so an unvetted server's
    /// tool that says it only reads still asks as a write).
    #[serde(default)]
    pub trust_annotations: bool,
    /// The most tools it may list (default 1000); a server listing more is refused with
    /// this key named, and its listing is read at most 100 pages deep.
    pub max_tools: Option<usize>,
}

/// The most tools a server may list unless its entry says otherwise.
const DEFAULT_MAX_TOOLS: usize = 1000;

/// How a host reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A program the host starts, confined, speaking MCP on its standard streams.
    Stdio {
        /// The program as written.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment variables it gets.
        env: Vec<(String, String)>,
        /// Where it starts (`None`: its state folder).
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The URL.
        url: String,
        /// Headers for every request.
        headers: Vec<(String, String)>,
        /// The bearer token, sent as `Authorization: Bearer ...`.
        token: Option<String>,
    },
}

/// Which protocol generation a server is spoken to in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McpProtocol {
    /// `server/discover` first, `initialize` if the server is older.
    #[default]
    Auto,
    /// 2026-07-28 only (sessionless).
    Modern,
    /// 2025-11-25 and older (the `initialize` handshake).
    Legacy,
}

/// A stdio server's confinement, beside what every one gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpServerSandbox {
    /// Whether it may use the network.
    pub network: bool,
    /// Whether it may make Unix-domain sockets.
    pub unix_sockets: bool,
    /// Its memory, bytes (`None`: the workers').
    pub memory_bytes: Option<u64>,
    /// Its processes and threads (`None`: the workers').
    pub max_processes: Option<u64>,
    /// More it may read and run.
    pub read_paths: Vec<PathBuf>,
    /// More it may write.
    pub write_paths: Vec<PathBuf>,
}

/// One server, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSettings {
    /// Its name.
    pub name: String,
    /// Its tools' names start with this.
    pub prefix: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// Which protocol generation it is spoken to in.
    pub protocol: McpProtocol,
    /// A stdio server's confinement.
    pub sandbox: McpServerSandbox,
    /// Whether its annotations may lower a tool's risk.
    pub trust_annotations: bool,
    /// The most tools it may list.
    pub max_tools: usize,
}

impl McpServerSettings {
    /// Where it is: the command line or the URL, for status and errors.
    pub fn endpoint(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, args, .. } => {
                let mut line = command.clone();
                for arg in args {
                    line.push(' ');
                    line.push_str(arg);
                }
                line
            }
            McpTransport::Http { url, .. } => url.clone(),
        }
    }
}

/// A server name: 1 to 32 of `[a-z0-9_-]`, starting with a letter.
fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Makes relative paths of `raw` relative to `base` (the config file's folder).
pub(super) fn rebase(raw: &mut RawMcpServer, base: &Path) {
    let join = |p: &PathBuf| {
        if p.is_relative() {
            base.join(p)
        } else {
            p.clone()
        }
    };
    raw.cwd = raw.cwd.as_ref().map(join);
    raw.read_paths = raw.read_paths.iter().map(join).collect();
    raw.write_paths = raw.write_paths.iter().map(join).collect();
}

/// Checks every entry: names valid and unique, prefixes unique, exactly one of `command`
/// and `url`, the keys of the other transport left out. The error names the entry and
/// says what to write.
pub(super) fn resolve(raw: &[RawMcpServer]) -> Result<Vec<McpServerSettings>, McpServerError> {
    let mut out: Vec<McpServerSettings> = Vec::new();
    for entry in raw {
        let name = &entry.name;
        if !valid_name(name) {
            return Err(McpServerError::Name { name: name.clone() });
        }
        if out.iter().any(|s| &s.name == name) {
            return Err(McpServerError::Twice { name: name.clone() });
        }
        let prefix = entry.prefix.clone().unwrap_or_else(|| format!("{name}_"));
        if prefix.len() > 40
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(McpServerError::Prefix {
                name: name.clone(),
                prefix,
            });
        }
        if let Some(other) = out.iter().find(|s| {
            !prefix.is_empty() && (s.prefix.starts_with(&prefix) || prefix.starts_with(&s.prefix))
        }) {
            return Err(McpServerError::Overlap {
                name: name.clone(),
                prefix,
                other: other.name.clone(),
                other_prefix: other.prefix.clone(),
            });
        }
        let stdio_keys = !entry.args.is_empty()
            || !entry.env.is_empty()
            || entry.cwd.is_some()
            || entry.network
            || entry.unix_sockets
            || entry.memory_mb.is_some()
            || entry.max_processes.is_some()
            || !entry.read_paths.is_empty()
            || !entry.write_paths.is_empty();
        let http_keys =
            entry.token.is_some() || entry.token_env.is_some() || !entry.headers.is_empty();
        let transport = match (&entry.command, &entry.url) {
            (Some(command), None) => {
                if http_keys {
                    return Err(McpServerError::HttpKeys { name: name.clone() });
                }
                if command.trim().is_empty() {
                    return Err(McpServerError::EmptyCommand { name: name.clone() });
                }
                McpTransport::Stdio {
                    command: command.clone(),
                    args: entry.args.clone(),
                    env: entry
                        .env
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    cwd: entry.cwd.clone(),
                }
            }
            (None, Some(url)) => {
                if stdio_keys {
                    return Err(McpServerError::StdioKeys { name: name.clone() });
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(McpServerError::Url {
                        name: name.clone(),
                        url: url.clone(),
                    });
                }
                let mut headers: Vec<(String, String)> = entry
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let token = match (&entry.token, &entry.token_env) {
                    (Some(_), Some(_)) => {
                        return Err(McpServerError::TwoTokens { name: name.clone() });
                    }
                    (Some(token), None) => Some(token.clone()),
                    (None, Some(var)) => {
                        Some(std::env::var(var).map_err(|_| McpServerError::TokenEnv {
                            name: name.clone(),
                            variable: var.clone(),
                        })?)
                    }
                    (None, None) => None,
                };
                if let Some((key, _)) = headers.iter().find(|(k, _)| {
                    [
                        "authorization",
                        "mcp-session-id",
                        "mcp-protocol-version",
                        "accept",
                        "content-type",
                        "host",
                    ]
                    .contains(&k.to_ascii_lowercase().as_str())
                }) {
                    return Err(McpServerError::OwnHeader {
                        name: name.clone(),
                        header: key.clone(),
                    });
                }
                headers.sort();
                McpTransport::Http {
                    url: url.clone(),
                    headers,
                    token,
                }
            }
            _ => {
                return Err(McpServerError::Transport { name: name.clone() });
            }
        };
        let protocol = match entry.protocol.as_deref() {
            None | Some("auto") => McpProtocol::Auto,
            Some("2026-07-28") => McpProtocol::Modern,
            Some("2025-11-25") => McpProtocol::Legacy,
            Some(other) => {
                return Err(McpServerError::Protocol {
                    name: name.clone(),
                    protocol: other.to_owned(),
                });
            }
        };
        if entry.max_tools == Some(0) {
            return Err(McpServerError::NoTools { name: name.clone() });
        }
        out.push(McpServerSettings {
            name: name.clone(),
            prefix,
            transport,
            protocol,
            sandbox: McpServerSandbox {
                network: entry.network,
                unix_sockets: entry.unix_sockets,
                memory_bytes: entry.memory_mb.map(|mb| mb.saturating_mul(1 << 20)),
                max_processes: entry.max_processes,
                read_paths: entry.read_paths.clone(),
                write_paths: entry.write_paths.clone(),
            },
            trust_annotations: entry.trust_annotations,
            max_tools: entry.max_tools.unwrap_or(DEFAULT_MAX_TOOLS),
        });
    }
    Ok(out)
}

/// What is wrong with an `[[mcp_servers]]` entry: the message names the entry (and the
/// key) and says what to write.
#[derive(Debug, thiserror::Error)]
pub(super) enum McpServerError {
    /// A name that cannot prefix tool names.
    #[error(
        "[[mcp_servers]] name = {name:?}: a server's name is 1 to 32 of a-z, 0-9, _ and -, \
         starting with a letter (it prefixes its tools' names)"
    )]
    Name {
        /// The name as written.
        name: String,
    },
    /// Two entries of one name.
    #[error("[[mcp_servers]] name = {name:?} is given twice: each server needs a name of its own")]
    Twice {
        /// The name.
        name: String,
    },
    /// A prefix tool names cannot start with.
    #[error(
        "[[mcp_servers]] {name}: prefix = {prefix:?} must be at most 40 of A-Z, a-z, 0-9, _ \
         and - (tool names allow nothing else)"
    )]
    Prefix {
        /// The server.
        name: String,
        /// Its prefix.
        prefix: String,
    },
    /// Two prefixes one of which starts the other.
    #[error(
        "[[mcp_servers]] {name}: its prefix {prefix:?} overlaps server {other}'s \
         {other_prefix:?}, so their tools' names could meet; give one a `prefix` of its own"
    )]
    Overlap {
        /// The server.
        name: String,
        /// Its prefix.
        prefix: String,
        /// The server listed before it whose prefix overlaps.
        other: String,
        /// That server's prefix.
        other_prefix: String,
    },
    /// HTTP keys on a server toolhost starts.
    #[error(
        "[[mcp_servers]] {name}: `token`, `token_env` and `headers` are for a server reached \
         by `url`; this one is a `command`"
    )]
    HttpKeys {
        /// The server.
        name: String,
    },
    /// `command = ""`.
    #[error("[[mcp_servers]] {name}: `command` is empty")]
    EmptyCommand {
        /// The server.
        name: String,
    },
    /// Keys of a started server on one reached by URL.
    #[error(
        "[[mcp_servers]] {name}: `args`, `env`, `cwd`, `network`, `unix_sockets`, \
         `memory_mb`, `max_processes`, `read_paths` and `write_paths` are for a server \
         toolhost starts (`command`); this one is reached by `url`"
    )]
    StdioKeys {
        /// The server.
        name: String,
    },
    /// A URL that is not http(s).
    #[error("[[mcp_servers]] {name}: url = {url:?} is not an http:// or https:// URL")]
    Url {
        /// The server.
        name: String,
        /// The URL as written.
        url: String,
    },
    /// Both `token` and `token_env`.
    #[error("[[mcp_servers]] {name}: give `token` or `token_env`, not both")]
    TwoTokens {
        /// The server.
        name: String,
    },
    /// `token_env` names a variable the environment does not have.
    #[error(
        "[[mcp_servers]] {name}: token_env = {variable:?}, but the environment has no such \
         variable (set it, or write `token`)"
    )]
    TokenEnv {
        /// The server.
        name: String,
        /// The variable.
        variable: String,
    },
    /// A header the MCP client sets itself.
    #[error(
        "[[mcp_servers]] {name}: header {header:?} is the MCP client's own (write a bearer \
         token as `token` or `token_env`)"
    )]
    OwnHeader {
        /// The server.
        name: String,
        /// The header.
        header: String,
    },
    /// Neither or both of `command` and `url`.
    #[error(
        "[[mcp_servers]] {name}: give exactly one of `command` (a program toolhost starts, \
         speaking MCP on stdio) and `url` (a streamable HTTP endpoint)"
    )]
    Transport {
        /// The server.
        name: String,
    },
    /// A protocol version toolhost does not speak.
    #[error(
        "[[mcp_servers]] {name}: protocol = {protocol:?}; write \"auto\", \"2026-07-28\" or \
         \"2025-11-25\""
    )]
    Protocol {
        /// The server.
        name: String,
        /// The version as written.
        protocol: String,
    },
    /// `max_tools = 0`.
    #[error("[[mcp_servers]] {name}: max_tools = 0 would refuse every tool; write at least 1")]
    NoTools {
        /// The server.
        name: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Vec<RawMcpServer> {
        #[derive(Deserialize)]
        struct File {
            mcp_servers: Vec<RawMcpServer>,
        }
        toml::from_str::<File>(text).expect("toml").mcp_servers
    }

    #[test]
    fn entries_resolve_with_their_prefix_and_transport() {
        let servers = resolve(&raw(
            "[[mcp_servers]]\nname = \"files\"\ncommand = \"node\"\nargs = [\"s.js\"]\n\
             [[mcp_servers]]\nname = \"web\"\nurl = \"http://127.0.0.1:1/mcp\"\ntoken = \"t\"\n",
        ))
        .expect("valid");
        assert_eq!(servers[0].prefix, "files_");
        assert_eq!(servers[0].endpoint(), "node s.js");
        assert!(!servers[0].sandbox.network);
        assert_eq!(
            servers[1].transport,
            McpTransport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: Vec::new(),
                token: Some("t".into()),
            }
        );
    }

    #[test]
    fn bad_entries_are_refused_naming_them() {
        for (text, says) in [
            ("name = \"A\"\ncommand = \"x\"", "1 to 32"),
            ("name = \"a\"", "exactly one of"),
            (
                "name = \"a\"\ncommand = \"x\"\nurl = \"http://h/\"",
                "exactly one of",
            ),
            ("name = \"a\"\nurl = \"ftp://h/\"", "not an http"),
            (
                "name = \"a\"\nurl = \"http://h/\"\nnetwork = true",
                "for a server toolhost starts",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ntoken = \"t\"",
                "reached by `url`",
            ),
            ("name = \"a\"\ncommand = \"x\"\nprefix = \"a b\"", "prefix"),
            (
                "name = \"a\"\ncommand = \"x\"\nprotocol = \"2024\"",
                "protocol",
            ),
        ] {
            let error = resolve(&raw(&format!("[[mcp_servers]]\n{text}\n")))
                .expect_err(text)
                .to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
        let twice = "[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\n\
                     [[mcp_servers]]\nname = \"a\"\ncommand = \"y\"\n";
        assert!(
            resolve(&raw(twice))
                .expect_err("twice")
                .to_string()
                .contains("twice")
        );
        let overlap = "[[mcp_servers]]\nname = \"a\"\ncommand = \"x\"\n\
                       [[mcp_servers]]\nname = \"a_b\"\ncommand = \"y\"\n";
        assert!(
            resolve(&raw(overlap))
                .expect_err("overlap")
                .to_string()
                .contains("overlaps")
        );
    }
}
