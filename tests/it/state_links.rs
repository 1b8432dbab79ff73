//! State folders are never followed: a plugin worker may write into a profile's state
//! folder, so a symbolic link (or a FIFO) planted where the session database, one of its
//! side files or the state folder itself belongs is refused, and what it points at is left
//! as it was. Through the real `SessionStore` and `Profile::load`.

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use toolhost::agent::sessions::SessionStore;
use toolhost::{LoadedConfig, Profile};

/// A profile's state folder, and outside it a file (0644, "x") and a folder (0755,
/// empty) that planted links point at.
struct Planted {
    root: tempfile::TempDir,
    state: PathBuf,
    file: PathBuf,
    folder: PathBuf,
}

impl Planted {
    fn new() -> Planted {
        let root = tempfile::tempdir().expect("temp dir");
        let state = root.path().join("state");
        fs::create_dir(&state).expect("state");
        fs::set_permissions(&state, fs::Permissions::from_mode(0o700)).expect("chmod");
        let outside = root.path().join("outside");
        fs::create_dir(&outside).expect("outside");
        let file = outside.join("victim");
        fs::write(&file, "x").expect("victim");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let folder = outside.join("folder");
        fs::create_dir(&folder).expect("folder");
        fs::set_permissions(&folder, fs::Permissions::from_mode(0o755)).expect("chmod");
        Planted {
            root,
            state,
            file,
            folder,
        }
    }

    fn untouched(&self) {
        let mode = |p: &Path| fs::metadata(p).expect("stat").mode() & 0o7777;
        assert_eq!(mode(&self.file), 0o644, "the file outside was chmodded");
        assert_eq!(fs::read(&self.file).expect("read"), b"x", "it was written");
        assert_eq!(mode(&self.folder), 0o755, "the folder outside was chmodded");
        assert_eq!(
            fs::read_dir(&self.folder).expect("list").count(),
            0,
            "something was created in the folder outside"
        );
    }
}

fn open_err(db: &Path) -> String {
    match SessionStore::open(db) {
        Ok(_) => panic!("{} opened despite a planted link or FIFO", db.display()),
        Err(e) => e.to_string(),
    }
}

fn assert_link_refused(err: &str, link: &Path) {
    assert!(
        err.contains(&format!("{} is a symbolic link", link.display()))
            && err.contains("remove it"),
        "{err}"
    );
}

#[test]
fn a_linked_session_database_is_refused_and_its_target_untouched() {
    let planted = Planted::new();
    let db = planted.state.join("sessions.sqlite3");
    for target in [
        planted.file.clone(),
        planted.folder.clone(),
        planted.folder.join("created-by-the-host"),
    ] {
        std::os::unix::fs::symlink(&target, &db).expect("symlink");
        assert_link_refused(&open_err(&db), &db);
        planted.untouched();
        fs::remove_file(&db).expect("remove the link");
    }
    // Without the link the store opens (0600).
    let store = SessionStore::open(&db).expect("opens");
    store.create(None).expect("a session");
    assert_eq!(fs::metadata(&db).expect("stat").mode() & 0o777, 0o600);
}

#[test]
fn a_linked_side_file_of_the_session_database_is_refused_and_its_target_untouched() {
    for suffix in ["-wal", "-shm", "-journal"] {
        let planted = Planted::new();
        let db = planted.state.join("sessions.sqlite3");
        let side = planted.state.join(format!("sessions.sqlite3{suffix}"));
        std::os::unix::fs::symlink(&planted.file, &side).expect("symlink");
        assert_link_refused(&open_err(&db), &side);
        planted.untouched();
        assert!(fs::symlink_metadata(&side).expect("stat").is_symlink());
    }
}

#[test]
fn a_fifo_beside_the_session_database_is_refused_without_blocking() {
    let planted = Planted::new();
    let db = planted.state.join("sessions.sqlite3");
    let wal = planted.state.join("sessions.sqlite3-wal");
    let c = std::ffi::CString::new(wal.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(open_err(&db)));
    let err = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("opening the store blocked on a FIFO");
    assert!(
        err.contains(&format!("{} is a FIFO, not a regular file", wal.display())),
        "{err}"
    );
    assert_eq!(
        fs::symlink_metadata(&wal).expect("stat").mode() & 0o777,
        0o644
    );
}

#[test]
fn a_linked_state_folder_is_refused_by_the_store_and_the_profile() {
    let planted = Planted::new();
    // A profile `work` whose state folder is a link to the folder outside.
    let config = planted.root.path().join("config.toml");
    fs::write(&config, "state_dir = \"state-home\"\n").expect("config");
    let profile = planted.root.path().join("profiles").join("work");
    fs::create_dir_all(&profile).expect("profile");
    fs::write(profile.join("config.toml"), "").expect("profile config");
    let state = planted.root.path().join("state-home/profiles/work/state");
    fs::create_dir_all(state.parent().expect("parent")).expect("state home");
    std::os::unix::fs::symlink(&planted.folder, &state).expect("symlink");

    assert_link_refused(&open_err(&state.join("sessions.sqlite3")), &state);
    planted.untouched();

    let loaded = LoadedConfig::load(Some(&config)).expect("config loads");
    let err = Profile::load(&loaded, "work").expect_err("a linked state folder is refused");
    assert_link_refused(&err.to_string(), &state);
    planted.untouched();

    // A link where older releases kept state is not moved (nor followed) either.
    fs::remove_file(&state).expect("unlink");
    let old = profile.join("state");
    std::os::unix::fs::symlink(&planted.folder, &old).expect("symlink");
    let err = Profile::load(&loaded, "work").expect_err("a linked old state folder is refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&old.display().to_string()) && msg.contains("not followed"),
        "{msg}"
    );
    assert!(!state.exists());
    planted.untouched();
}
