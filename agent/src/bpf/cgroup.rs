//! A process's cgroup from the id the kernel recorded, resolved once per cgroup and shared.
//!
//! The id is the inode number of the cgroup's directory in the cgroup2 file system (64-bit
//! kernels: kernfs ids are inode numbers). The cheap source is /proc/PID/cgroup of the process,
//! checked against that inode (the process may have moved, its pid been reused); when the process
//! is gone or hidden (ProtectProc=invisible), a walk of the cgroup2 tree finds the directory with
//! that inode (at most one walk per second; a cgroup gone by then stays unknown). A path outside
//! the daemon's cgroup namespace (`/../..`, a daemon in a pod) is taken as /proc gives it.
//!
//! Container names come from the runtime's own files, read once per container: the Kubernetes
//! CRI annotations of the container's OCI config (containerd, CRI-O), containers/storage's
//! `containers.json` (Podman, CRI-O), Docker's `config.v2.json`. Those are root's files: without
//! read access to them (a daemon running as a dynamic user) only what the path says is known.
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::model::cgroup::{self, CgroupInfo, Runtime};
use crate::model::{Body, Cgroup, Event, Process};

/// Cgroups kept; beyond it those no socket holds any more are forgotten.
const CACHE_CAP: usize = 4096;
/// Walks of the cgroup tree are at least this far apart.
const WALK_GAP: Duration = Duration::from_secs(1);
/// A walk stops after this many directories (a host with more cgroups resolves the rest by pid).
const WALK_MAX_DIRS: usize = 100_000;
/// Runtime files larger than this are not read.
const FILE_MAX: u64 = 8 << 20;

/// Where container runtimes keep what names their containers (read, never written).
#[derive(Debug, Clone)]
pub struct RuntimeFiles {
    /// containers/storage (Podman, CRI-O): graph root, run root and driver.
    pub storage: Option<(PathBuf, PathBuf, String)>,
    /// containerd's v2 task bundles (`NAMESPACE/ID/config.json`).
    pub containerd: PathBuf,
    /// Docker's container directories (`ID/config.v2.json`).
    pub docker: PathBuf,
}

impl RuntimeFiles {
    /// The host's: containers/storage as /etc/containers/storage.conf says, else its defaults.
    pub fn host() -> Self {
        let conf = read_bounded(Path::new("/etc/containers/storage.conf"));
        let t = conf.and_then(|s| toml::from_str::<toml::Table>(&s).ok());
        let st = t.as_ref().and_then(|t| t.get("storage")).and_then(|s| s.as_table());
        let get = |k: &str, d: &str| st.and_then(|s| s.get(k)).and_then(|v| v.as_str()).unwrap_or(d).to_string();
        RuntimeFiles {
            storage: Some((
                PathBuf::from(get("graphroot", "/var/lib/containers/storage")),
                PathBuf::from(get("runroot", "/run/containers/storage")),
                get("driver", "overlay"),
            )),
            containerd: PathBuf::from("/run/containerd/io.containerd.runtime.v2.task"),
            docker: PathBuf::from("/var/lib/docker/containers"),
        }
    }

    /// None: for tests.
    pub fn none() -> Self {
        RuntimeFiles { storage: None, containerd: PathBuf::new(), docker: PathBuf::new() }
    }

    /// Fill the container's name (and pod's) from the files of its runtime (any, if unknown).
    pub fn name(&self, info: &mut CgroupInfo) {
        let Some(id) = info.container.clone() else { return };
        let runtime = info.runtime;
        let may = |r: Runtime| runtime.is_none_or(|x| x == r);
        let mut configs = Vec::new();
        if may(Runtime::Containerd) && !self.containerd.as_os_str().is_empty() {
            configs.push(self.containerd.join("k8s.io").join(&id).join("config.json"));
        }
        if let (true, Some((_, run, driver))) = (may(Runtime::CriO), &self.storage) {
            configs.push(run.join(format!("{driver}-containers")).join(&id).join("userdata/config.json"));
        }
        for c in configs {
            if let Some(text) = read_bounded(&c) {
                cgroup::names_from_oci_config(info, &text);
                break;
            }
        }
        if info.container_name.is_some() {
            return;
        }
        if let (true, Some((graph, _, driver))) = (may(Runtime::Podman) || may(Runtime::CriO), &self.storage) {
            let list = graph.join(format!("{driver}-containers")).join("containers.json");
            info.container_name = read_bounded(&list).and_then(|t| cgroup::name_from_storage(&t, &id));
        }
        if info.container_name.is_none() && may(Runtime::Docker) && !self.docker.as_os_str().is_empty() {
            let conf = self.docker.join(&id).join("config.v2.json");
            info.container_name = read_bounded(&conf).and_then(|t| cgroup::name_from_docker(&t));
        }
    }
}

/// A file's text, if it is no larger than FILE_MAX.
fn read_bounded(p: &Path) -> Option<String> {
    let f = std::fs::File::open(p).ok()?;
    if f.metadata().ok()?.len() > FILE_MAX {
        return None;
    }
    let mut s = String::new();
    f.take(FILE_MAX).read_to_string(&mut s).ok()?;
    Some(s)
}

/// What a walk of the tree says about an id.
enum Walked {
    Found(String),
    /// Not in a walk made after it was asked for: the cgroup is gone (or beyond WALK_MAX_DIRS).
    Gone,
    /// Not in the last walk, which is too recent to walk again: ask later.
    Later,
}

/// The cgroup of each cgroup id seen, resolved once.
#[derive(Debug)]
pub struct Cgroups {
    proc_root: PathBuf,
    /// The cgroup2 mount point (None: no check of /proc's answer, no walk).
    root: Option<PathBuf>,
    files: RuntimeFiles,
    cache: HashMap<u64, Option<Cgroup>>,
    /// The last walk: when, and every directory's path by inode.
    index: Option<(Instant, HashMap<u64, String>)>,
    /// Walks made (for tests and the cost story).
    pub walks: u64,
}

impl Cgroups {
    /// The host's: /proc, the mounted cgroup2 tree, the runtimes' usual files.
    pub fn host() -> Self {
        Cgroups::new(Path::new("/proc"), super::load::cgroup2_root().ok(), RuntimeFiles::host())
    }

    pub fn new(proc_root: &Path, root: Option<PathBuf>, files: RuntimeFiles) -> Self {
        Cgroups { proc_root: proc_root.into(), root, files, cache: HashMap::new(), index: None, walks: 0 }
    }

    /// Give every process in the event its cgroup.
    pub fn attach(&mut self, ev: &mut Event) {
        match &mut ev.body {
            Body::Process(p) => self.fill(p),
            Body::Snapshot(s) | Body::Close(s) => self.fill(&mut s.process),
            _ => {}
        }
    }

    fn fill(&mut self, p: &mut Process) {
        if p.cgroup.is_none() && p.cgroup_id != 0 {
            p.cgroup = self.of(p.cgroup_id, p.pid);
        }
    }

    /// The cgroup `id` of process `pid` (as the kernel recorded them).
    pub fn of(&mut self, id: u64, pid: u32) -> Option<Cgroup> {
        if id == 0 {
            return None;
        }
        if let Some(c) = self.cache.get(&id) {
            return c.clone();
        }
        let path = match self.proc_path(pid) {
            // Outside our cgroup namespace (a daemon in a pod): not in the tree we see, but its
            // names (unit, container, pod) are all in the path.
            Some(p) if outside(&p) => Some(p),
            Some(p) if self.inode(&p).is_none_or(|i| i == id) => Some(p),
            _ => match self.walk_for(id) {
                Walked::Found(p) => Some(p),
                Walked::Gone => None,
                Walked::Later => return None,
            },
        };
        let c = path.map(|p| self.resolve(&p));
        self.keep(id, c.clone());
        c
    }

    /// The cgroup process `pid` is in now, and its id (0 where the tree is not mounted).
    pub fn of_pid(&mut self, pid: u32) -> Option<(u64, Cgroup)> {
        let path = self.proc_path(pid)?;
        let id = match self.inode(&path) {
            Some(id) if id != 0 => id,
            _ => return Some((0, self.resolve(&path))),
        };
        if let Some(Some(c)) = self.cache.get(&id) {
            return Some((id, c.clone()));
        }
        let c = self.resolve(&path);
        self.keep(id, Some(c.clone()));
        Some((id, c))
    }

    fn resolve(&self, path: &str) -> Cgroup {
        let mut info = cgroup::parse(path);
        self.files.name(&mut info);
        Cgroup::new(info)
    }

    fn keep(&mut self, id: u64, c: Option<Cgroup>) {
        if self.cache.len() >= CACHE_CAP {
            self.cache.retain(|_, c| c.as_ref().is_some_and(|c| c.others() > 0));
            if self.cache.len() >= CACHE_CAP / 2 {
                self.cache.clear();
            }
        }
        self.cache.insert(id, c);
    }

    fn proc_path(&self, pid: u32) -> Option<String> {
        if pid == 0 {
            return None;
        }
        let text = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup")).ok()?;
        cgroup::v2_path(&text).map(str::to_string)
    }

    /// The inode of a cgroup's directory (None: no tree to look in, or no such directory).
    fn inode(&self, path: &str) -> Option<u64> {
        let root = self.root.as_ref()?;
        if outside(path) {
            return Some(0);
        }
        Some(std::fs::metadata(root.join(path.trim_start_matches('/'))).map_or(0, |m| m.ino()))
    }

    fn walk_for(&mut self, id: u64) -> Walked {
        let Some(root) = self.root.clone() else { return Walked::Gone };
        if let Some((at, index)) = &self.index {
            if let Some(p) = index.get(&id) {
                return Walked::Found(p.clone());
            }
            if at.elapsed() < WALK_GAP {
                return Walked::Later;
            }
        }
        let index = walk(&root);
        self.walks += 1;
        let found = index.get(&id).cloned();
        self.index = Some((Instant::now(), index));
        found.map_or(Walked::Gone, Walked::Found)
    }
}

/// A path outside the reader's cgroup namespace (`/../../kubepods/...`).
fn outside(path: &str) -> bool {
    path.split('/').any(|c| c == "..")
}

/// Every directory of the cgroup2 tree under `root`, by inode, as cgroup paths (`/a/b`).
/// Reads directory entries only (their inode numbers come with them): no stat per cgroup.
fn walk(root: &Path) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    if let Ok(m) = std::fs::metadata(root) {
        out.insert(m.ino(), "/".to_string());
    }
    let mut todo = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, path)) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            if out.len() >= WALK_MAX_DIRS {
                return out;
            }
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = format!("{path}/{}", e.file_name().to_string_lossy());
            out.insert(e.ino(), p.clone());
            todo.push((e.path(), p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc and cgroup tree in a temporary directory.
    struct Fake {
        dir: PathBuf,
    }

    impl Fake {
        fn new(name: &str) -> Fake {
            let dir = std::env::temp_dir().join(format!("tv-cgroup-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("proc")).unwrap();
            std::fs::create_dir_all(dir.join("cg")).unwrap();
            Fake { dir }
        }
        fn cgroup(&self, path: &str) -> u64 {
            let d = self.dir.join("cg").join(path.trim_start_matches('/'));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::metadata(d).unwrap().ino()
        }
        fn process(&self, pid: u32, path: &str) {
            let d = self.dir.join("proc").join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cgroup"), format!("1:cpu:/\n0::{path}\n")).unwrap();
        }
        fn cgroups(&self, files: RuntimeFiles) -> Cgroups {
            Cgroups::new(&self.dir.join("proc"), Some(self.dir.join("cg")), files)
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    const ID: &str = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";

    #[test]
    fn a_live_process_is_resolved_from_proc_once_per_cgroup_and_shared() {
        let f = Fake::new("live");
        let id = f.cgroup("/system.slice/nginx.service");
        f.process(10, "/system.slice/nginx.service");
        f.process(11, "/system.slice/nginx.service");
        let mut c = f.cgroups(RuntimeFiles::none());
        let a = c.of(id, 10).expect("resolved");
        assert_eq!((a.path.as_str(), a.unit.as_deref()), ("/system.slice/nginx.service", Some("nginx.service")));
        // Cached: the second process shares it, even once /proc no longer has the first.
        std::fs::remove_dir_all(f.dir.join("proc/10")).unwrap();
        let b = c.of(id, 10).unwrap();
        assert!(std::ptr::eq(&*a, &*b), "one allocation per cgroup");
        assert_eq!(c.walks, 0);
        assert_eq!(c.of(0, 11), None, "no id: nothing to resolve");
    }

    #[test]
    fn a_moved_or_gone_process_is_found_by_a_walk_and_a_dead_cgroup_stays_unknown() {
        let f = Fake::new("walk");
        let old = f.cgroup(&format!("/libpod_parent/libpod-{ID}"));
        f.cgroup("/system.slice/sshd.service");
        f.process(20, "/system.slice/sshd.service"); // moved since the kernel saw it
        let mut c = f.cgroups(RuntimeFiles::none());
        let got = c.of(old, 20).expect("found by the walk");
        assert_eq!((got.container.as_deref(), got.runtime), (Some(ID), Some(Runtime::Podman)));
        assert_eq!(c.walks, 1);
        // A cgroup that is not in the tree: the last walk was before it was asked for, and too
        // recent to walk again: ask later, nothing cached.
        assert_eq!(c.of(999_999_999, 0), None);
        assert_eq!(c.walks, 1);
        if let Some((at, _)) = c.index.as_mut() {
            *at -= WALK_GAP;
        }
        assert_eq!(c.of(999_999_999, 0), None);
        assert_eq!(c.walks, 2);
        assert_eq!(c.of(999_999_999, 0), None);
        assert_eq!(c.walks, 2, "a cgroup gone is remembered as such");
    }

    #[test]
    fn a_process_outside_our_cgroup_namespace_is_named_by_its_path() {
        let f = Fake::new("ns");
        let uid = "0f3b5a1e-2c4d-4e6f-8a9b-0c1d2e3f4a5b";
        f.process(40, &format!("/../../kubepods/besteffort/pod{uid}/{ID}"));
        let mut c = f.cgroups(RuntimeFiles::none());
        let got = c.of(123_456, 40).expect("named by its path");
        assert_eq!((got.container.as_deref(), got.pod.as_deref()), (Some(ID), Some(uid)));
        assert_eq!(c.walks, 0, "no walk: the tree we see does not hold it");
    }

    #[test]
    fn of_pid_gives_the_id_and_the_cache_forgets_only_what_nobody_holds() {
        let f = Fake::new("pid");
        let id = f.cgroup("/system.slice/a.service");
        f.process(30, "/system.slice/a.service");
        let mut c = f.cgroups(RuntimeFiles::none());
        let (got, held) = c.of_pid(30).unwrap();
        assert_eq!(got, id);
        for i in 0..CACHE_CAP as u64 {
            c.keep(1_000_000 + i, None);
        }
        assert!(c.cache.contains_key(&id), "held by a socket: kept");
        assert!(c.cache.len() < CACHE_CAP / 2);
        drop(held);
        assert_eq!(c.of_pid(99), None, "no such process");
    }

    #[test]
    fn names_come_from_the_runtime_files_of_the_container() {
        let f = Fake::new("names");
        let graph = f.dir.join("storage");
        std::fs::create_dir_all(graph.join("overlay-containers")).unwrap();
        std::fs::write(
            graph.join("overlay-containers/containers.json"),
            format!(r#"[{{"id":"{ID}","names":["tv-box"]}}]"#),
        )
        .unwrap();
        let docker = f.dir.join("docker");
        std::fs::create_dir_all(docker.join(ID)).unwrap();
        std::fs::write(docker.join(ID).join("config.v2.json"), r#"{"Name":"/web"}"#).unwrap();
        let ctrd = f.dir.join("containerd");
        std::fs::create_dir_all(ctrd.join("k8s.io").join(ID)).unwrap();
        std::fs::write(
            ctrd.join("k8s.io").join(ID).join("config.json"),
            r#"{"annotations":{"io.kubernetes.cri.container-name":"app","io.kubernetes.cri.sandbox-name":"app-1","io.kubernetes.cri.sandbox-namespace":"prod"}}"#,
        )
        .unwrap();
        let files =
            RuntimeFiles { storage: Some((graph, f.dir.join("run"), "overlay".into())), containerd: ctrd, docker };
        let name = |path: String| {
            let mut i = cgroup::parse(&path);
            files.name(&mut i);
            (i.container_name, i.pod_namespace)
        };
        assert_eq!(name(format!("/libpod_parent/libpod-{ID}")), (Some("tv-box".into()), None));
        assert_eq!(name(format!("/system.slice/docker-{ID}.scope")), (Some("web".into()), None));
        assert_eq!(
            name(format!(
                "/kubepods.slice/kubepods-pod0f3b5a1e_2c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-{ID}.scope"
            )),
            (Some("app".into()), Some("prod".into()))
        );
        assert_eq!(name("/system.slice/x.service".into()), (None, None));
    }

    #[test]
    fn this_process_resolves_on_this_host() {
        let mut c = Cgroups::host();
        let me = std::process::id();
        let Some((id, cg)) = c.of_pid(me) else { return }; // no cgroup v2 line (cgroup v1 only)
        assert!(cg.path.starts_with('/'), "{cg:?}");
        if id != 0 {
            assert_eq!(c.of(id, me).as_ref(), Some(&cg));
        }
    }
}
