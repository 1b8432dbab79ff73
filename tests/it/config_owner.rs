//! Config files other users can change are refused (issue 54, item 3): the host's
//! `config.toml` and a profile's, owned by another user, writable by group or others, in
//! a folder others can write, or a symlink to another user's file, stop the command with
//! the file, what is wrong and the fix, and never offer `strict_permissions = false`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{OtherUser, toolhost_command};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A private folder (0700) with an empty plugin folder and a good `config.toml` (0644)
/// whose profiles live in `profiles/`, and a profile `coder` (0644).
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        chmod(dir.path(), 0o700);
        std::fs::create_dir(dir.path().join("plugins")).expect("plugins");
        let site = Site { dir };
        site.write(&site.config(), "profiles_dir = \"profiles\"\n");
        std::fs::create_dir_all(site.profile().parent().expect("parent")).expect("profile");
        site.write(&site.profile(), "tools = []\n");
        site
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn config(&self) -> PathBuf {
        self.path().join("config.toml")
    }

    fn profile(&self) -> PathBuf {
        self.path().join("profiles/coder/config.toml")
    }

    fn write(&self, file: &Path, contents: &str) {
        std::fs::write(file, contents).expect("write");
        chmod(file, 0o644);
    }

    /// `toolhost list --config CONFIG --plugins PLUGINS` and `args`.
    fn list(&self, config: &Path, args: &[&str]) -> Output {
        toolhost_command()
            .arg("--config")
            .arg(config)
            .arg("list")
            .arg("--plugins")
            .arg(self.path().join("plugins"))
            .args(args)
            .output()
            .expect("toolhost list")
    }
}

/// `out` failed, saying `needles`, and without offering the plugin files' switch.
fn refused(out: &Output, needles: &[&str]) {
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "no {needle:?} in: {stderr}");
    }
    assert!(
        !stderr.contains("strict_permissions"),
        "a config file's refusal offers the switch written in it: {stderr}"
    );
}

#[test]
fn a_config_or_profile_others_can_write_is_refused_with_the_chmod_fix() {
    let site = Site::new();
    let good = site.list(&site.config(), &["--profile", "coder"]);
    assert!(good.status.success(), "{}", text(&good.stderr));

    let config = site.config();
    let shown = config.display().to_string();
    chmod(&config, 0o666);
    refused(
        &site.list(&config, &[]),
        &[
            &shown,
            "writable by group and others",
            "mode 0666",
            &format!("`chmod go-w {shown}`"),
        ],
    );
    chmod(&config, 0o620);
    refused(&site.list(&config, &[]), &["writable by its group"]);
    chmod(&config, 0o644);

    // The folder it is in.
    chmod(site.path(), 0o777);
    let folder = site.path().display().to_string();
    refused(
        &site.list(&config, &[]),
        &[
            &format!("not reading the config file {shown}: its directory {folder}"),
            &format!("`chmod go-w {folder}`"),
        ],
    );
    chmod(site.path(), 0o700);

    // A profile's config.
    let profile = site.profile();
    let profile_shown = profile.display().to_string();
    chmod(&profile, 0o646);
    refused(
        &site.list(&config, &["--profile", "coder"]),
        &[
            &format!("the profile's config file {profile_shown}"),
            "writable by others",
            &format!("`chmod go-w {profile_shown}`"),
        ],
    );
    chmod(&profile, 0o644);
    let again = site.list(&config, &["--profile", "coder"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
}

#[test]
fn as_root_a_config_another_user_owns_or_links_to_is_refused_and_roots_own_works() {
    let Some(user) = OtherUser::create(
        "as_root_a_config_another_user_owns_or_links_to_is_refused_and_roots_own_works",
    ) else {
        return;
    };
    let site = Site::new();
    let config = site.config();
    let shown = config.display().to_string();

    // (e) Root's own, 0644, with root's profile: used.
    let good = site.list(&config, &["--profile", "coder"]);
    assert!(good.status.success(), "{}", text(&good.stderr));

    // (a) Owned by the other user: refused, naming the file and the chown fix.
    user.chown(&config);
    refused(
        &site.list(&config, &[]),
        &[
            &format!("the config file {shown} is owned by a user other than root"),
            &format!("owner {} (uid {})", user.name, user.uid),
            &format!("`chown root {shown}`"),
        ],
    );
    std::os::unix::fs::chown(&config, Some(0), Some(0)).expect("chown back");

    // (c) A symlink to the other user's file: refused by the target's owner.
    let theirs = site.path().join("theirs");
    std::fs::create_dir(&theirs).expect("their folder");
    chmod(&theirs, 0o755);
    let target = theirs.join("config.toml");
    site.write(&target, "[plugins]\nstrict_permissions = false\n");
    user.chown(&target);
    let link = site.path().join("linked.toml");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let target_shown = std::fs::canonicalize(&target)
        .expect("canonical")
        .display()
        .to_string();
    refused(
        &site.list(&link, &[]),
        &[
            &format!("not reading the config file {}", link.display()),
            &format!("the symlink's target {target_shown} is owned by a user other than root"),
            &format!("`chown root {target_shown}`"),
        ],
    );
    // ... and a link to root's file in the other user's folder, by that folder.
    std::os::unix::fs::chown(&target, Some(0), Some(0)).expect("chown back");
    user.chown(&theirs);
    refused(
        &site.list(&link, &[]),
        &["the target's directory", "chown root"],
    );

    // (d) A profile's config owned by the other user: refused when the profile loads.
    let profile = site.profile();
    user.chown(&profile);
    refused(
        &site.list(&config, &["--profile", "coder"]),
        &[
            &format!(
                "the profile's config file {} is owned by a user other than root",
                profile.display()
            ),
            &format!("`chown root {}`", profile.display()),
        ],
    );
    // The host's config alone still loads.
    let host_only = site.list(&config, &[]);
    assert!(host_only.status.success(), "{}", text(&host_only.stderr));
}
