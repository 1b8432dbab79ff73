//! What `[reload]` resolves to, with its defaults (the file's schema says its defaults
//! from here).

/// `[reload]`: whether `toolhost serve` watches its plugin folders, and after how many
/// reloads status recommends a restart (the watcher's timing is [`super::LoadedConfig::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadSettings {
    /// Watch the plugin folders.
    pub watch: bool,
    /// Reloads after which status recommends a restart.
    pub max_generations: u64,
}

impl Default for ReloadSettings {
    fn default() -> Self {
        ReloadSettings {
            watch: true,
            max_generations: 64,
        }
    }
}
