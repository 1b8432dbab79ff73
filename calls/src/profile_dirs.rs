//! A profile's folders, the one place their layout is written down: `state/` (the
//! plugins': notes, memory, records a plugin keeps), and the host's own `outputs/`,
//! `approvals/` and `sessions/` beside it. The layout carries a security rule: a plugin's
//! worker may write `state/` and nothing else of its profile's, so what the host keeps
//! (cut outputs, lasting approvals, conversations) is never in a folder a plugin can
//! reach. [`Folder::worker_writes`] says so per folder, and the worker's sandbox is built
//! from it.

use std::path::{Path, PathBuf};

/// One of a profile's folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folder {
    /// The plugins' state: `ToolContext::state_dir`, memory notes, edit records.
    State,
    /// Kept outputs (the full text of cut results).
    Outputs,
    /// Lasting ("always") approvals.
    Approvals,
    /// The agent's conversations and the chat prompt's history.
    Sessions,
}

impl Folder {
    /// Every folder, in the order they are moved from an older layout.
    pub const ALL: [Folder; 4] = [
        Folder::State,
        Folder::Outputs,
        Folder::Sessions,
        Folder::Approvals,
    ];

    /// Its name under the profile's folder.
    pub fn name(self) -> &'static str {
        match self {
            Folder::State => "state",
            Folder::Outputs => "outputs",
            Folder::Approvals => "approvals",
            Folder::Sessions => "sessions",
        }
    }

    /// Whether the profile's plugin workers may write it (only `state/`: the others are
    /// the host's, and a plugin that could write them could read other callers' outputs,
    /// approve its own calls or rewrite conversations).
    pub fn worker_writes(self) -> bool {
        matches!(self, Folder::State)
    }
}

/// Where one profile keeps what it keeps: `<root>/state`, `<root>/outputs`,
/// `<root>/approvals`, `<root>/sessions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDirs {
    root: PathBuf,
}

impl ProfileDirs {
    /// The folders of profile `name` under `profiles_root` (`<state_dir>/profiles`).
    pub fn under(profiles_root: &Path, name: &str) -> ProfileDirs {
        ProfileDirs {
            root: profiles_root.join(name),
        }
    }

    /// The folders of a profile whose own folder is `root` (older releases kept them
    /// beside its config, in its config folder).
    pub fn at(root: PathBuf) -> ProfileDirs {
        ProfileDirs { root }
    }

    /// The folders of the profile whose plugins' state folder is `state_dir` (the others
    /// are beside it). For callers that were handed the state folder alone (a library's
    /// `AgentParts`, older APIs).
    pub fn of_state(state_dir: &Path) -> ProfileDirs {
        ProfileDirs {
            root: state_dir
                .parent()
                .map_or_else(PathBuf::new, Path::to_path_buf),
        }
    }

    /// The profile's own folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `folder`'s path.
    pub fn path(&self, folder: Folder) -> PathBuf {
        self.root.join(folder.name())
    }

    /// The plugins' state folder.
    pub fn state(&self) -> PathBuf {
        self.path(Folder::State)
    }

    /// The kept outputs' folder.
    pub fn outputs(&self) -> PathBuf {
        self.path(Folder::Outputs)
    }

    /// The lasting approvals' folder.
    pub fn approvals(&self) -> PathBuf {
        self.path(Folder::Approvals)
    }

    /// The conversations' folder.
    pub fn sessions(&self) -> PathBuf {
        self.path(Folder::Sessions)
    }

    /// The folders the profile's plugin workers may write ([`Folder::worker_writes`]).
    pub fn worker_writable(&self) -> Vec<PathBuf> {
        Folder::ALL
            .into_iter()
            .filter(|f| f.worker_writes())
            .map(|f| self.path(f))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_writes_the_state_folder_only_and_the_hosts_folders_sit_beside_it() {
        let dirs = ProfileDirs::under(Path::new("/s/profiles"), "dev");
        assert_eq!(dirs.state(), Path::new("/s/profiles/dev/state"));
        assert_eq!(dirs.outputs(), Path::new("/s/profiles/dev/outputs"));
        assert_eq!(dirs.approvals(), Path::new("/s/profiles/dev/approvals"));
        assert_eq!(dirs.sessions(), Path::new("/s/profiles/dev/sessions"));
        assert_eq!(dirs.worker_writable(), vec![dirs.state()]);
        for folder in Folder::ALL {
            let host_only = !folder.worker_writes();
            assert_eq!(host_only, folder != Folder::State, "{folder:?}");
            // No host folder is inside the plugins' one.
            assert!(folder == Folder::State || !dirs.path(folder).starts_with(dirs.state()));
        }
        assert_eq!(ProfileDirs::of_state(&dirs.state()), dirs);
    }
}
