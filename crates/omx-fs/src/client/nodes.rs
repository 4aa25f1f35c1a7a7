//! The client's node ids: one per path (like sshfs), except that the names of one file
//! with several hard links share the node of the first one found (so they show one
//! `st_ino`, as locally); the kernel's references to each, and what the client knows
//! about a node between requests.

use crate::proto::{Attr, Stamp};
use fuser::FUSE_ROOT_ID;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

/// The extended attribute the kernel asks for before every write and chown (to drop
/// file capabilities): one round trip each unless its absence is known.
pub const CAPABILITY_XATTR: &[u8] = b"security.capability";

pub struct Node {
    /// The name requests for the node go to: the one last found naming it.
    pub path: Vec<u8>,
    /// Its other names known here (hard links of one file, see [`Nodes::looked_up`]).
    links: Vec<Vec<u8>>,
    /// The server's inode number of the file the node was last found to be (0: none
    /// or a directory), its key in [`Nodes`]' `by_file`.
    file: u64,
    lookups: u64,
    /// Extended attributes known to be absent, until when (the attribute timeout, as
    /// for the kernel's cached attributes).
    absent_xattrs: Vec<(Vec<u8>, Instant)>,
    /// Until when the node is known to have no extended attributes at all (a listing
    /// said so): every name is absent.
    no_xattrs: Option<Instant>,
    /// The attributes a GETATTR or SETATTR reply brought, with when they were asked
    /// for: the kernel's next GETATTR within the attribute timeout is answered from them.
    attr: Option<(Attr, Instant)>,
    /// Bumped whenever the node may have changed: a reply to a request sent before
    /// brings attributes that may be older, and is not kept.
    epoch: u64,
    /// The attributes this client last gave the kernel for the node (a lookup, create,
    /// getattr or setattr reply), while they are what the kernel holds: none once the
    /// node may have changed (the epoch they were given at is past) or when a reply
    /// raced a change. A lookup answered here gives them back (see
    /// [`Nodes::known_present`]).
    given: Option<(Attr, u64)>,
    /// The file type (`S_IFMT` bits) of the kernel's inode for the node, once a reply
    /// gave it one (0 before): the kernel fails a `GETATTR` or `SETATTR` reply of
    /// another type with `EIO` and marks its inode bad.
    kind: u32,
    /// Entry changes in this directory sent and not answered yet: while one is in
    /// flight, no reply's attributes are kept (the server may serve it either side).
    changing: u32,
    /// The highest change count (the server's stamp after a change) among the change
    /// replies since none was in flight: only the reply with it brings the newest
    /// attributes (the server's threads may send replies in another order than they
    /// made the changes).
    busy_max: u64,
    /// What the server's file was (inode, size, mtime, ctime) when the kernel's cached
    /// pages of it were last known to match it: at an open that finds it so, the pages
    /// are kept (close-to-open as NFS). None after a change through this client.
    pages: Option<PagesBasis>,
    /// Bumped at every change of the file's data through this client (write, setattr,
    /// fallocate): an open sent before one does not vouch for the pages.
    data_epoch: u64,
    /// Its name was removed through this client (unlinked, or renamed over) while the
    /// kernel still holds it: the path names something else or nothing, so the node's
    /// attributes come from one of its open handles, as a local `fstat` does.
    pub detached: bool,
}

/// The attributes that say a file's data is unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct PagesBasis {
    ino: u64,
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
}

impl PagesBasis {
    fn of(a: &Attr) -> PagesBasis {
        PagesBasis {
            ino: a.ino,
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

impl Node {
    fn new(path: Vec<u8>) -> Node {
        Node {
            path,
            links: Vec::new(),
            file: 0,
            lookups: 1,
            absent_xattrs: Vec::new(),
            no_xattrs: None,
            attr: None,
            epoch: 0,
            given: None,
            kind: 0,
            changing: 0,
            busy_max: 0,
            pages: None,
            data_epoch: 0,
            detached: false,
        }
    }
}

/// Every name of a directory this client made (and has changed only itself since, as
/// far as it knows), from when it last asked: a lookup of another name is answered
/// "absent" within the entry timeout, as a negative entry would be. Each change this
/// client makes there asks again: its reply's stamps say whether the directory was
/// as this client left it (then `since` moves on) or changed by someone else (then it
/// is forgotten).
struct Complete {
    names: HashSet<Vec<u8>>,
    since: Instant,
    /// The directory's stamp after this client's last change (none from a server
    /// that sends none: then only the entry timeout bounds it).
    stamp: Option<Stamp>,
}

/// Directories with more names are not tracked.
const COMPLETE_MAX: usize = 65536;

#[derive(Default)]
pub struct Nodes {
    by_id: HashMap<u64, Node>,
    by_path: HashMap<Vec<u8>, u64>,
    /// The node of each server file (inode number) the kernel holds, but directories:
    /// another name found for a file with several links joins its node.
    by_file: HashMap<u64, u64>,
    next: u64,
    complete: HashMap<u64, Complete>,
    /// Counts the extended attribute changes sent through this client: a listing
    /// asked before one does not vouch for a node having none.
    xattr_changes: u64,
}

/// A path's parent directory and last component.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

impl Nodes {
    pub fn new() -> Nodes {
        let mut n = Nodes {
            next: FUSE_ROOT_ID + 1,
            ..Default::default()
        };
        n.by_id.insert(FUSE_ROOT_ID, Node::new(Vec::new()));
        n.by_path.insert(Vec::new(), FUSE_ROOT_ID);
        n
    }

    pub fn path(&self, ino: u64) -> Option<Vec<u8>> {
        self.by_id.get(&ino).map(|n| n.path.clone())
    }

    /// The node of a path the kernel now holds one more reference to, found on the
    /// server as `attr`. A file with several links whose node the kernel holds under
    /// another name gets that node (the kernel then sees one inode, as locally: one
    /// `st_ino`, one link count, one set of cached pages), the name leaving the node
    /// it named before, if another; requests for the node go to this name from now on.
    pub fn looked_up(&mut self, path: Vec<u8>, attr: &Attr) -> u64 {
        self.name_exists(&path);
        let kind = attr.mode & libc::S_IFMT;
        let file = if kind == libc::S_IFDIR { 0 } else { attr.ino };
        let mut current = self.by_path.get(&path).copied();
        // One of several names of a node now names another file (replaced elsewhere):
        // it leaves the node, whose other names still name the node's file.
        let replaced = current
            .and_then(|id| self.by_id.get(&id))
            .is_some_and(|n| !n.links.is_empty() && n.file != 0 && file != 0 && n.file != file);
        if replaced {
            self.detach(&path);
            current = None;
        }
        let joined = self
            .by_file
            .get(&file)
            .copied()
            .filter(|&id| file != 0 && attr.nlink > 1 && Some(id) != current)
            .filter(|id| {
                self.by_id
                    .get(id)
                    .is_some_and(|n| !n.detached && (n.kind == 0 || n.kind == kind))
            });
        let id = match (joined, current) {
            (None, None) => {
                let id = self.next;
                self.next += 1;
                self.by_path.insert(path.clone(), id);
                self.by_id.insert(id, Node::new(path));
                self.found_file(id, file);
                return id;
            }
            (None, Some(id)) => id,
            (Some(id), _) => {
                if current.is_some() {
                    self.detach(&path);
                }
                self.by_path.insert(path.clone(), id);
                let node = self.by_id.get_mut(&id).expect("both maps");
                let before = std::mem::replace(&mut node.path, path);
                node.links.retain(|l| *l != node.path);
                node.links.push(before);
                id
            }
        };
        let node = self.by_id.get_mut(&id).expect("both maps");
        node.lookups += 1;
        // The kernel now holds newer attributes than any kept here.
        node.attr = None;
        node.epoch += 1;
        self.found_file(id, file);
        id
    }

    /// Node `id` is the server's file `file` (0: a directory, or not known).
    fn found_file(&mut self, id: u64, file: u64) {
        let Some(node) = self.by_id.get_mut(&id) else {
            return;
        };
        let before = std::mem::replace(&mut node.file, file);
        if before != file && self.by_file.get(&before) == Some(&id) {
            self.by_file.remove(&before);
        }
        if file != 0 {
            self.by_file.insert(file, id);
        }
    }

    /// The node's current epoch, to give [`Nodes::keep_attr`] with a reply.
    pub fn epoch(&self, ino: u64) -> u64 {
        self.by_id.get(&ino).map_or(0, |n| n.epoch)
    }

    /// Keeps attributes asked for at `asked` unless the node changed since `epoch`
    /// or an entry change in it is in flight.
    pub fn keep_attr(&mut self, ino: u64, epoch: u64, attr: Attr, asked: Instant) {
        if let Some(n) = self
            .by_id
            .get_mut(&ino)
            .filter(|n| n.epoch == epoch && n.changing == 0)
        {
            n.attr = Some((attr, asked));
        }
    }

    /// An entry change in directory `ino` is being sent: as [`Nodes::changed`], and
    /// counted in flight until [`Nodes::change_done`]. The epoch to give that.
    pub fn change_sent(&mut self, ino: u64) -> u64 {
        self.changed(ino);
        if let Some(n) = self.by_id.get_mut(&ino) {
            n.changing += 1;
        }
        self.epoch(ino)
    }

    /// The reply to an entry change in directory `ino` sent at `epoch` (every one,
    /// failed or not): the directory's attributes right after the change with the
    /// change's count (the stamp after it), if the reply brought them, are kept as a
    /// `GETATTR` reply's would be (the kernel asks for them after every change),
    /// unless another change of it through this client is in flight or was sent
    /// since, or one answered meanwhile was made later on the server.
    pub fn change_done(&mut self, ino: u64, epoch: u64, attr: Option<(Attr, u64)>, asked: Instant) {
        let Some(n) = self.by_id.get_mut(&ino) else {
            return;
        };
        n.changing = n.changing.saturating_sub(1);
        let count = attr.map_or(0, |(_, c)| c);
        n.busy_max = n.busy_max.max(count);
        let newest = n.busy_max == count;
        if n.changing == 0 {
            n.busy_max = 0;
        }
        if let Some((a, _)) = attr.filter(|_| newest) {
            self.keep_attr(ino, epoch, a, asked);
        }
    }

    /// The successful reply to an entry change in directory `dir` sent at `epoch` (from
    /// [`Nodes::change_sent`]) at `asked`: `change`, the directory's stamps from just
    /// before and after it, and `attr`, its attributes right after, as the reply gave
    /// them. The one place both the kept attributes and the directory's knowledge
    /// learn of a change.
    pub fn change_answered(
        &mut self,
        dir: u64,
        epoch: u64,
        change: Option<(Stamp, Stamp)>,
        attr: Option<Attr>,
        asked: Instant,
    ) {
        let counted = attr.zip(change).map(|(a, (_, after))| (a, after.count));
        self.change_done(dir, epoch, counted, asked);
        self.dir_changed(dir, change, asked);
    }

    /// An entry change in `dir` sent at `epoch` failed: what the directory holds is no
    /// longer known (the error may say someone else changed it).
    pub fn change_failed(&mut self, dir: u64, epoch: u64, asked: Instant) {
        self.change_done(dir, epoch, None, asked);
        self.dir_unknown(dir);
    }

    /// A `GETATTR` or `SETATTR` reply gives the kernel `attr` (asked at `asked`, at the
    /// node's `epoch`): kept ([`Nodes::keep_attr`]) and known given ([`Nodes::gave`]).
    pub fn keep_attr_given(&mut self, ino: u64, epoch: u64, attr: Attr, asked: Instant) {
        let unchanged = self.epoch(ino) == epoch;
        self.keep_attr(ino, epoch, attr, asked);
        self.gave(ino, attr, unchanged);
    }

    /// Kept attributes of `ino` no older than `ttl`, and how long they stay valid.
    pub fn fresh_attr(&self, ino: u64, ttl: Duration) -> Option<(Attr, Duration)> {
        let (attr, asked) = self.by_id.get(&ino)?.attr.as_ref()?;
        let left = ttl.checked_sub(asked.elapsed())?;
        (!left.is_zero()).then_some((*attr, left))
    }

    /// `ino` may be changing (a write, a setattr, an entry added or removed in it):
    /// its kept attributes are dropped, and replies to earlier requests not kept.
    pub fn changed(&mut self, ino: u64) {
        if let Some(n) = self.by_id.get_mut(&ino) {
            n.attr = None;
            n.epoch += 1;
        }
    }

    /// The file's data may change through this client (a write, truncate,
    /// fallocate): its cached pages are no longer vouched for by any attributes.
    pub fn data_changed(&mut self, ino: u64) {
        if let Some(n) = self.by_id.get_mut(&ino) {
            n.pages = None;
            n.data_epoch += 1;
        }
    }

    /// The node's data epoch, taken when an open is sent.
    pub fn data_epoch(&self, ino: u64) -> u64 {
        self.by_id.get(&ino).map_or(0, |n| n.data_epoch)
    }

    /// An open sent at `data_epoch` found the file as `attr`: whether the kernel may
    /// keep its cached pages (they were cached while the file had these very
    /// attributes and nothing changed it through this client since). From now on the
    /// pages are those of `attr` (the kernel drops them otherwise), unless the data
    /// changed through this client while the open was in flight.
    pub fn opened(&mut self, ino: u64, data_epoch: u64, attr: &Attr) -> bool {
        let Some(n) = self.by_id.get_mut(&ino) else {
            return false;
        };
        if n.data_epoch != data_epoch {
            n.pages = None;
            return false;
        }
        let now = PagesBasis::of(attr);
        let keep = n.pages == Some(now);
        n.pages = Some(now);
        keep
    }

    /// Whether an open found the file other than at the previous open through this
    /// client (`attr` against the pages' basis): changed elsewhere (or another file at
    /// the path), so the kernel's attributes of it (its size: reads stop there) are old.
    pub fn changed_elsewhere(&self, ino: u64, attr: &Attr) -> bool {
        self.by_id
            .get(&ino)
            .and_then(|n| n.pages)
            .is_some_and(|p| p != PagesBasis::of(attr))
    }

    /// [`Nodes::changed`] for the node of `path`, if any.
    pub fn path_changed(&mut self, path: &[u8]) {
        if let Some(&id) = self.by_path.get(path) {
            self.changed(id);
        }
    }

    /// Whether extended attribute `name` of `ino` is known to be absent.
    pub fn xattr_absent(&self, ino: u64, name: &[u8]) -> bool {
        let now = Instant::now();
        self.by_id.get(&ino).is_some_and(|n| {
            n.no_xattrs.is_some_and(|until| until > now)
                || n.absent_xattrs
                    .iter()
                    .any(|(x, until)| x == name && *until > now)
        })
    }

    /// The count of extended attribute changes sent so far (see [`Nodes::no_xattrs`]).
    pub fn xattr_changes(&self) -> u64 {
        self.xattr_changes
    }

    /// A listing asked for when the count of extended attribute changes was `changes`
    /// found node `ino` without any: every name is absent until `until`, unless one
    /// was changed through this client since.
    pub fn no_xattrs(&mut self, ino: u64, until: Instant, changes: u64) {
        if changes == self.xattr_changes {
            if let Some(n) = self.by_id.get_mut(&ino) {
                n.no_xattrs = Some(until);
            }
        }
    }

    /// Extended attribute `name` of `ino` is absent until `until` (as far as this
    /// client knows: another client may set it meanwhile).
    pub fn set_xattr_absent(&mut self, ino: u64, name: &[u8], until: Instant) {
        if let Some(n) = self.by_id.get_mut(&ino) {
            let now = Instant::now();
            n.absent_xattrs.retain(|(x, t)| x != name && *t > now);
            n.absent_xattrs.push((name.to_vec(), until));
        }
    }

    /// The extended attributes of `ino` are changing through this client.
    pub fn xattrs_changed(&mut self, ino: u64) {
        self.xattr_changes += 1;
        if let Some(n) = self.by_id.get_mut(&ino) {
            n.absent_xattrs.clear();
            n.no_xattrs = None;
        }
    }

    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == FUSE_ROOT_ID {
            return;
        }
        if let Some(node) = self.by_id.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
            if node.lookups == 0 {
                let node = self.by_id.remove(&ino).expect("present");
                self.complete.remove(&ino);
                for name in std::iter::once(&node.path).chain(&node.links) {
                    if self.by_path.get(name) == Some(&ino) {
                        self.by_path.remove(name);
                    }
                }
                if self.by_file.get(&node.file) == Some(&ino) {
                    self.by_file.remove(&node.file);
                }
            }
        }
    }

    /// Directory `ino`, made by this client at `since`, is empty (as of `stamp`).
    pub fn made_dir(&mut self, ino: u64, since: Instant, stamp: Option<Stamp>) {
        let names = HashSet::new();
        self.complete.insert(
            ino,
            Complete {
                names,
                since,
                stamp,
            },
        );
    }

    /// This client changed an entry of `dir` in a request sent at `asked`; `change`
    /// is the directory's stamps from just before and after, as the reply gave them.
    pub fn dir_changed(&mut self, dir: u64, change: Option<(Stamp, Stamp)>, asked: Instant) {
        let Some(c) = self.complete.get_mut(&dir) else {
            return;
        };
        match (c.stamp, change) {
            (Some(last), Some((before, after))) if last == before => {
                c.stamp = Some(after);
                c.since = c.since.max(asked);
            }
            // An older server: bounded by the entry timeout from the mkdir only.
            (None, _) => {}
            _ => {
                self.complete.remove(&dir);
            }
        }
    }

    /// A lookup of `name` in `dir`, answered here when the name is known present: the
    /// directory is known complete (as for [`Nodes::known_absent`]), the kernel holds
    /// the name's node (a file, not a directory) and the attributes this client last
    /// gave it are still what it holds. The node, counted one lookup more (the
    /// kernel's), and those attributes: given back with no validity, they change
    /// nothing in the kernel but end its trust in them (its next `stat`, or read past
    /// the size, asks). So a name this client made is found without asking after the
    /// kernel's entry expired (the `LOOKUP` before each `unlink`), and a file's
    /// attributes are still never answered older than `attr_timeout`.
    pub fn known_present(&mut self, dir: u64, name: &[u8], ttl: Duration) -> Option<(u64, Attr)> {
        let c = self.complete.get(&dir)?;
        let left = ttl.checked_sub(c.since.elapsed())?;
        if left.is_zero() || !c.names.contains(name) {
            return None;
        }
        let path = join(&self.by_id.get(&dir)?.path, OsStr::from_bytes(name));
        let id = *self.by_path.get(&path)?;
        let n = self.by_id.get_mut(&id)?;
        let (attr, epoch) = n.given?;
        if epoch != n.epoch || n.detached || attr.mode & libc::S_IFMT == libc::S_IFDIR {
            return None;
        }
        n.lookups += 1;
        Some((id, attr))
    }

    /// The epoch of the node at `path` (none: no node), taken when a request that may
    /// give the kernel attributes for it is sent: see [`Nodes::gave`].
    pub fn path_epoch(&self, path: &[u8]) -> Option<u64> {
        self.by_path.get(path).map(|id| self.epoch(*id))
    }

    /// A reply gives the kernel the entry `path` with `attr` (a lookup, create, mkdir...
    /// sent when the path's node epoch was `sent`, from [`Nodes::path_epoch`]): as
    /// [`Nodes::looked_up`], and the attributes are those the kernel now holds unless
    /// the node changed meanwhile.
    pub fn entry_given(&mut self, path: Vec<u8>, attr: Attr, sent: Option<u64>) -> u64 {
        let unchanged = self.path_epoch(&path) == sent;
        let ino = self.looked_up(path, &attr);
        self.gave(ino, attr, unchanged);
        ino
    }

    /// The kernel is given `attr` for `ino`; `unchanged`: nothing changed the node
    /// since the request was sent (else the kernel may refuse them, as older than a
    /// change it made itself, and what it holds is not known here).
    pub fn gave(&mut self, ino: u64, attr: Attr, unchanged: bool) {
        if let Some(n) = self.by_id.get_mut(&ino) {
            n.given = unchanged.then_some((attr, n.epoch));
            n.kind = attr.mode & libc::S_IFMT;
        }
    }

    /// Whether `attr`, from the server for the path of `ino`, is of another type than
    /// the kernel's inode of the node: someone else replaced the name (a file by a
    /// directory...), which the kernel must look up again, not be given.
    pub fn other_kind(&self, ino: u64, attr: &Attr) -> bool {
        self.by_id
            .get(&ino)
            .is_some_and(|n| n.kind != 0 && n.kind != attr.mode & libc::S_IFMT)
    }

    /// How long `name` in `dir` is known to be absent, if it is.
    pub fn known_absent(&self, dir: u64, name: &[u8], ttl: Duration) -> Option<Duration> {
        let c = self.complete.get(&dir)?;
        let left = ttl.checked_sub(c.since.elapsed())?;
        (!left.is_zero() && !c.names.contains(name)).then_some(left)
    }

    /// The server no longer has `ino`'s path (someone else removed it): its kept
    /// attributes are dropped, and what its parent holds is no longer known.
    pub fn gone(&mut self, ino: u64) {
        self.changed(ino);
        let Some(path) = self.by_id.get(&ino).map(|n| n.path.clone()) else {
            return;
        };
        if let Some(&dir) = self.by_path.get(split(&path).0) {
            self.complete.remove(&dir);
        }
    }

    /// What directory `dir` holds is no longer known (an error said otherwise).
    pub fn dir_unknown(&mut self, dir: u64) {
        self.complete.remove(&dir);
    }

    fn complete_of<'a>(&mut self, path: &'a [u8]) -> Option<(&mut Complete, &'a [u8])> {
        let (dir, name) = split(path);
        let id = *self.by_path.get(dir)?;
        Some((self.complete.get_mut(&id)?, name))
    }

    fn name_exists(&mut self, path: &[u8]) {
        if let Some((c, name)) = self.complete_of(path) {
            c.names.insert(name.to_vec());
            if c.names.len() > COMPLETE_MAX {
                let (dir, _) = split(path);
                if let Some(id) = self.by_path.get(dir).copied() {
                    self.complete.remove(&id);
                }
            }
        }
    }

    fn name_gone(&mut self, path: &[u8]) {
        if let Some((c, name)) = self.complete_of(path) {
            c.names.remove(name);
        }
    }

    pub fn removed(&mut self, path: &[u8]) {
        self.name_gone(path);
        self.detach(path);
    }

    /// The node at `path` no longer has that name: its requests go to another of its
    /// names, or it is detached when it has none left.
    fn detach(&mut self, path: &[u8]) {
        if let Some(id) = self.by_path.remove(path) {
            if let Some(n) = self.by_id.get_mut(&id) {
                if n.path == path {
                    match n.links.pop() {
                        Some(other) => n.path = other,
                        None => n.detached = true,
                    }
                } else {
                    n.links.retain(|l| l != path);
                }
                n.attr = None;
                n.epoch += 1;
            }
        }
    }

    /// The node now at `path`, if any.
    pub fn id_of(&self, path: &[u8]) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// The server's file at `path` is another one than the node's open files (removed
    /// or renamed over by someone else): the node keeps only its handles, the name is
    /// still there.
    pub fn replaced(&mut self, path: &[u8]) {
        self.detach(path);
    }

    /// Whether `ino`'s name was removed through this client.
    pub fn detached(&self, ino: u64) -> bool {
        self.by_id.get(&ino).is_some_and(|n| n.detached)
    }

    /// `from` (and everything below it) is now `to`.
    pub fn renamed(&mut self, from: &[u8], to: &[u8]) {
        self.name_gone(from);
        self.name_exists(to);
        self.detach(to);
        let mut prefix = from.to_vec();
        prefix.push(b'/');
        let mut moved = Vec::new();
        for (&id, node) in self.by_id.iter_mut() {
            for name in std::iter::once(&mut node.path).chain(node.links.iter_mut()) {
                let new = if *name == from {
                    to.to_vec()
                } else if name.starts_with(&prefix) {
                    [to, &name[from.len()..]].concat()
                } else {
                    continue;
                };
                moved.push((id, std::mem::replace(name, new.clone()), new));
            }
        }
        // All old names out before any new one in: a new name may be another's old.
        for (id, old, _) in &moved {
            if self.by_path.get(old) == Some(id) {
                self.by_path.remove(old);
            }
        }
        for (id, _, new) in moved {
            self.by_path.insert(new, id);
        }
    }
}

pub fn join(dir: &[u8], name: &OsStr) -> Vec<u8> {
    let name = name.as_bytes();
    if dir.is_empty() {
        name.to_vec()
    } else {
        [dir, b"/", name].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    /// A regular file with one link, of no known server inode.
    const FILE: Attr = Attr {
        ino: 0,
        size: 0,
        blocks: 0,
        atime: (0, 0),
        mtime: (0, 0),
        ctime: (0, 0),
        mode: libc::S_IFREG | 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
    };

    #[test]
    fn hard_links_share_the_node_of_the_name_found_first() {
        let mut n = Nodes::new();
        let one = Attr { ino: 9, ..FILE };
        let two = Attr { nlink: 2, ..one };
        let a = n.looked_up(b"a".to_vec(), &one);
        assert_eq!(
            n.looked_up(b"d/b".to_vec(), &two),
            a,
            "another name, one node"
        );
        assert_eq!(
            n.path(a).as_deref(),
            Some(&b"d/b"[..]),
            "asked by the name last found"
        );
        assert_eq!((n.id_of(b"a"), n.id_of(b"d/b")), (Some(a), Some(a)));
        assert_eq!(n.looked_up(b"a".to_vec(), &two), a, "found again");
        assert_eq!(
            n.path(a).as_deref(),
            Some(&b"d/b"[..]),
            "an old name changes nothing"
        );
        // Directories never share (their link count is not hard links).
        let dir = Attr {
            ino: 20,
            mode: libc::S_IFDIR | 0o755,
            nlink: 3,
            ..FILE
        };
        let d1 = n.looked_up(b"x".to_vec(), &dir);
        assert_ne!(n.looked_up(b"y".to_vec(), &dir), d1);
        // A name that was another node's (a file since replaced by a link) leaves it.
        let old = n.looked_up(b"f".to_vec(), &Attr { ino: 11, ..FILE });
        assert_eq!(n.looked_up(b"f".to_vec(), &Attr { nlink: 3, ..one }), a);
        assert!(n.detached(old), "its only name went");
        // Removing names: requests go to one left; detached with none.
        n.removed(b"d/b");
        assert!(!n.detached(a));
        assert_ne!(n.path(a).as_deref(), Some(&b"d/b"[..]));
        n.removed(b"f");
        assert_eq!(n.path(a).as_deref(), Some(&b"a"[..]));
        n.removed(b"a");
        assert!(n.detached(a));
        // One name of several replaced elsewhere by another file: a node of its own.
        let two = Attr { nlink: 2, ..one };
        let p = n.looked_up(b"p".to_vec(), &two);
        let q = n.looked_up(b"q".to_vec(), &two);
        assert_eq!(p, q);
        let other = n.looked_up(b"p".to_vec(), &Attr { ino: 12, ..FILE });
        assert_ne!(other, q);
        assert_eq!(
            (n.id_of(b"p"), n.path(q).as_deref()),
            (Some(other), Some(&b"q"[..]))
        );
        // Detached, it is joined by no new name.
        let g = n.looked_up(b"g".to_vec(), &two);
        assert_ne!(g, a);
        // A file with one link is its name's own node, even at an inode number known
        // (the other names are gone: the number is the one name's now).
        let e = n.looked_up(b"e".to_vec(), &one);
        assert_ne!(e, g);
        assert_eq!(n.looked_up(b"h".to_vec(), &two), e);
    }

    #[test]
    fn renames_and_forgets_follow_every_name_of_a_node() {
        let mut n = Nodes::new();
        let two = Attr {
            ino: 9,
            nlink: 2,
            ..FILE
        };
        let a = n.looked_up(b"x/a".to_vec(), &two);
        assert_eq!(n.looked_up(b"y/b".to_vec(), &two), a);
        n.renamed(b"x", b"z");
        assert_eq!((n.id_of(b"z/a"), n.id_of(b"x/a")), (Some(a), None));
        n.renamed(b"y/b", b"y/c");
        assert_eq!(n.path(a).as_deref(), Some(&b"y/c"[..]));
        n.removed(b"y/c");
        assert_eq!(n.path(a).as_deref(), Some(&b"z/a"[..]));
        // The kernel's lookups: three (x/a, y/b, and one more found again).
        assert_eq!(n.looked_up(b"z/a".to_vec(), &two), a);
        n.forget(a, 3);
        assert_eq!(n.id_of(b"z/a"), None, "forgotten with every name");
        let again = n.looked_up(b"z/a".to_vec(), &two);
        assert_ne!(again, a, "a new node");
        assert_eq!(n.looked_up(b"w".to_vec(), &two), again);
    }

    #[test]
    fn a_listing_without_xattrs_answers_every_name_absent_unless_one_changed_since() {
        let mut n = Nodes::new();
        let a = n.looked_up(b"a".to_vec(), &FILE);
        let b = n.looked_up(b"b".to_vec(), &FILE);
        let asked = n.xattr_changes();
        n.no_xattrs(a, Instant::now() + TTL, asked);
        assert!(n.xattr_absent(a, b"user.x") && n.xattr_absent(a, b"system.posix_acl_access"));
        assert!(!n.xattr_absent(b, b"user.x"));
        // A change through this client: forgotten, and a listing asked before it
        // (answered after) does not vouch for any node.
        n.xattrs_changed(a);
        assert!(!n.xattr_absent(a, b"user.x"));
        n.no_xattrs(b, Instant::now() + TTL, asked);
        assert!(!n.xattr_absent(b, b"user.x"));
        // Expired.
        n.no_xattrs(b, Instant::now(), n.xattr_changes());
        assert!(!n.xattr_absent(b, b"user.x"));
    }

    #[test]
    fn a_gone_node_forgets_its_attributes_and_its_parents_contents() {
        let mut n = Nodes::new();
        let d = n.looked_up(b"d".to_vec(), &FILE);
        n.made_dir(d, Instant::now(), None);
        let f = n.looked_up(b"d/f".to_vec(), &FILE);
        n.keep_attr(f, n.epoch(f), Attr::default(), Instant::now());
        assert!(n.fresh_attr(f, TTL).is_some());
        assert!(n.known_absent(d, b"g", TTL).is_some());
        n.gone(f);
        assert!(
            n.fresh_attr(f, TTL).is_none(),
            "attributes of a gone file kept"
        );
        assert!(
            n.known_absent(d, b"g", TTL).is_none(),
            "its directory still known"
        );
        assert_eq!(
            n.path(f).as_deref(),
            Some(&b"d/f"[..]),
            "the kernel still holds it"
        );
        n.gone(12345);
    }

    #[test]
    fn pages_are_kept_only_for_an_unchanged_file() {
        let mut n = Nodes::new();
        let f = n.looked_up(b"f".to_vec(), &FILE);
        let a = Attr {
            ino: 7,
            size: 10,
            mtime: (100, 1),
            ctime: (100, 1),
            ..Default::default()
        };
        let e = n.data_epoch(f);
        assert!(!n.opened(f, e, &a), "nothing cached yet");
        assert!(n.opened(f, e, &a), "unchanged");
        let atime = Attr {
            atime: (200, 0),
            ..a
        };
        assert!(n.opened(f, e, &atime), "a read elsewhere changes nothing");
        for changed in [
            Attr {
                mtime: (100, 2),
                ..a
            },
            Attr {
                ctime: (101, 1),
                ..a
            },
            Attr { size: 11, ..a },
            Attr { ino: 8, ..a },
        ] {
            n.opened(f, e, &a);
            assert!(n.opened(f, e, &a));
            assert!(!n.changed_elsewhere(f, &a), "as at the last open");
            assert!(n.changed_elsewhere(f, &changed), "{changed:?}");
            assert!(!n.opened(f, e, &changed), "{changed:?}");
        }
        assert!(n.opened(f, e, &Attr { ino: 8, ..a }), "the new basis");
        assert!(
            !n.changed_elsewhere(f, &Attr { ino: 8, ..a }),
            "as at the last open"
        );
        n.data_changed(f);
        assert!(
            !n.opened(f, n.data_epoch(f), &a),
            "written through this client"
        );
        assert!(n.opened(f, n.data_epoch(f), &a));
        // An open sent before a write through this client vouches for nothing.
        let before = n.data_epoch(f);
        n.data_changed(f);
        assert!(!n.opened(f, before, &a));
        assert!(!n.opened(f, n.data_epoch(f), &a), "no basis was recorded");
    }

    #[test]
    fn a_name_removed_or_renamed_over_detaches_its_node() {
        let mut n = Nodes::new();
        let a = n.looked_up(b"a".to_vec(), &FILE);
        let b = n.looked_up(b"b".to_vec(), &FILE);
        let c = n.looked_up(b"c".to_vec(), &FILE);
        assert!(!n.detached(a) && !n.detached(b));
        n.renamed(b"a", b"b");
        assert!(!n.detached(a), "moved, still named");
        assert!(n.detached(b), "renamed over");
        assert_eq!(n.path(a).as_deref(), Some(&b"b"[..]));
        n.removed(b"c");
        assert!(n.detached(c));
        // A new file at the old name is a new node, not detached.
        let c2 = n.looked_up(b"c".to_vec(), &FILE);
        assert_ne!(c2, c);
        assert!(!n.detached(c2));
        // An exchange (three renames through a temporary name) detaches neither.
        let d = n.looked_up(b"d".to_vec(), &FILE);
        n.renamed(b"d", b"\0exchange");
        n.renamed(b"c", b"d");
        n.renamed(b"\0exchange", b"c");
        assert!(!n.detached(d) && !n.detached(c2));
    }

    #[test]
    fn a_made_directory_knows_its_names() {
        let mut n = Nodes::new();
        let d = n.looked_up(b"d".to_vec(), &FILE);
        n.made_dir(d, Instant::now(), None);
        assert!(n.known_absent(d, b"x", TTL).is_some());
        let x = n.looked_up(b"d/x".to_vec(), &FILE);
        assert!(
            n.known_absent(d, b"x", TTL).is_none(),
            "made through the client"
        );
        n.renamed(b"d/x", b"d/y");
        assert!(n.known_absent(d, b"x", TTL).is_some());
        assert!(n.known_absent(d, b"y", TTL).is_none(), "renamed into it");
        n.removed(b"d/y");
        assert!(n.known_absent(d, b"y", TTL).is_some());
        assert!(n.known_absent(d, b"y", Duration::ZERO).is_none(), "expired");
        n.dir_unknown(d);
        assert!(
            n.known_absent(d, b"z", TTL).is_none(),
            "an error made it unknown"
        );
        n.made_dir(d, Instant::now(), None);
        n.forget(x, 1);
        n.forget(d, 1);
        assert!(
            n.known_absent(d, b"z", TTL).is_none(),
            "forgotten with its node"
        );
    }

    #[test]
    fn a_known_name_is_answered_with_what_the_kernel_holds_only() {
        let mut n = Nodes::new();
        let d = n.looked_up(b"d".to_vec(), &FILE);
        n.made_dir(d, Instant::now(), None);
        let file = Attr {
            ino: 7,
            mode: libc::S_IFREG | 0o644,
            size: 3,
            ..Attr::default()
        };
        let f = n.entry_given(b"d/f".to_vec(), file, None);
        let size = |n: &mut Nodes, ttl| n.known_present(d, b"f", ttl).map(|(i, a)| (i, a.size));
        assert_eq!(size(&mut n, TTL), Some((f, 3)), "the create's attributes");
        assert!(n.known_present(d, b"g", TTL).is_none(), "not a name there");
        assert!(
            n.known_present(FUSE_ROOT_ID, b"d", TTL).is_none(),
            "not known complete"
        );
        assert!(size(&mut n, Duration::ZERO).is_none(), "expired");
        n.changed(f);
        assert!(
            size(&mut n, TTL).is_none(),
            "changed: the kernel's are not known"
        );
        let e = n.epoch(f);
        n.keep_attr_given(f, e, Attr { size: 9, ..file }, Instant::now());
        assert_eq!(size(&mut n, TTL), Some((f, 9)), "a getattr reply's");
        let e = n.epoch(f);
        n.changed(f);
        n.keep_attr_given(f, e, file, Instant::now());
        assert!(size(&mut n, TTL).is_none(), "a reply that raced a change");
        let e = n.epoch(f);
        n.entry_given(b"d/f".to_vec(), file, Some(e + 1));
        assert!(
            size(&mut n, TTL).is_none(),
            "a lookup reply that raced a change"
        );
        let dir = Attr {
            mode: libc::S_IFDIR | 0o755,
            ..file
        };
        n.entry_given(b"d/s".to_vec(), dir, None);
        assert!(n.known_present(d, b"s", TTL).is_none(), "a directory");
        assert!(
            n.other_kind(f, &dir),
            "a directory where the kernel has a file"
        );
        assert!(!n.other_kind(f, &file));
        assert!(!n.other_kind(d, &file), "a type never given is not checked");
        // The kernel counts a lookup for each answer (two here) as for the create's and
        // the lookup's replies: the node lives until it forgets them all.
        n.forget(f, 3);
        assert!(n.path(f).is_some());
        n.forget(f, 1);
        assert!(n.path(f).is_none());
        let f = n.entry_given(b"d/f".to_vec(), file, None);
        n.removed(b"d/f");
        assert!(n.known_present(d, b"f", TTL).is_none(), "removed");
        n.forget(f, 1);
    }

    #[test]
    fn stamps_keep_a_made_directory_known_while_unchanged_by_others() {
        let stamp = |count| Stamp { count, mtime_ns: 5 };
        let mut n = Nodes::new();
        let d = n.looked_up(b"d".to_vec(), &FILE);
        let old = Instant::now() - Duration::from_secs(2);
        let ttl = Duration::from_secs(1);
        n.made_dir(d, old, Some(stamp(1)));
        assert!(n.known_absent(d, b"x", ttl).is_none(), "past the timeout");
        n.dir_changed(d, Some((stamp(1), stamp(2))), Instant::now());
        assert!(
            n.known_absent(d, b"x", ttl).is_some(),
            "confirmed by the server: known again from this change"
        );
        n.dir_changed(d, Some((stamp(4), stamp(5))), Instant::now());
        assert!(
            n.known_absent(d, b"x", TTL).is_none(),
            "someone else changed it (counts 2 -> 4)"
        );
        n.made_dir(d, Instant::now(), Some(stamp(7)));
        n.dir_changed(d, None, Instant::now());
        assert!(
            n.known_absent(d, b"x", TTL).is_none(),
            "a change without stamps leaves nothing known"
        );
        n.made_dir(d, Instant::now(), None);
        n.dir_changed(d, Some((stamp(1), stamp(2))), Instant::now());
        assert!(
            n.known_absent(d, b"x", TTL).is_some(),
            "no stamps from the mkdir: the timeout alone bounds it"
        );
    }

    #[test]
    fn a_directory_keeps_the_attributes_of_its_last_change_only() {
        let mut n = Nodes::new();
        let d = n.looked_up(b"d".to_vec(), &FILE);
        let at = |size| Attr {
            size,
            ..Attr::default()
        };
        // One change: its reply's attributes are kept.
        let e = n.change_sent(d);
        n.change_done(d, e, Some((at(1), 1)), Instant::now());
        assert_eq!(n.fresh_attr(d, TTL).map(|(a, _)| a.size), Some(1));
        // Two in flight, answered in order: the first's not kept (the second was sent
        // since), the second's kept.
        let (e1, e2) = (n.change_sent(d), n.change_sent(d));
        assert!(n.fresh_attr(d, TTL).is_none(), "dropped at the send");
        n.change_done(d, e1, Some((at(2), 2)), Instant::now());
        assert!(n.fresh_attr(d, TTL).is_none());
        n.change_done(d, e2, Some((at(3), 3)), Instant::now());
        assert_eq!(n.fresh_attr(d, TTL).map(|(a, _)| a.size), Some(3));
        // Sent in order, made in the other order on the server, answered in the
        // order sent: the last reply brings the older attributes (count 4, not 5).
        let (e1, e2) = (n.change_sent(d), n.change_sent(d));
        n.change_done(d, e1, Some((at(5), 5)), Instant::now());
        n.change_done(d, e2, Some((at(4), 4)), Instant::now());
        assert!(n.fresh_attr(d, TTL).is_none(), "older attributes kept");
        // Answered in the other order: the later-sent one's reply comes while the
        // first is in flight (the server may have served it first): not kept.
        let (e1, e2) = (n.change_sent(d), n.change_sent(d));
        n.change_done(d, e2, Some((at(4), 7)), Instant::now());
        assert!(
            n.fresh_attr(d, TTL).is_none(),
            "kept with a change in flight"
        );
        n.change_done(d, e1, Some((at(5), 6)), Instant::now());
        assert!(n.fresh_attr(d, TTL).is_none(), "an older send's reply kept");
        // A getattr answered while a change is in flight is not kept either.
        let g = n.epoch(d);
        let e = n.change_sent(d);
        n.keep_attr(d, n.epoch(d), at(6), Instant::now());
        assert!(n.fresh_attr(d, TTL).is_none());
        n.change_done(d, e, None, Instant::now());
        n.keep_attr(d, g, at(7), Instant::now());
        assert!(
            n.fresh_attr(d, TTL).is_none(),
            "a getattr sent before the change"
        );
    }

    #[test]
    fn kept_attributes_never_older_than_a_change() {
        let mut n = Nodes::new();
        let f = n.looked_up(b"f".to_vec(), &FILE);
        let a = Attr {
            size: 7,
            ..Attr::default()
        };
        let before = n.epoch(f);
        n.changed(f); // a write sent after the getattr
        n.keep_attr(f, before, a, Instant::now());
        assert!(
            n.fresh_attr(f, TTL).is_none(),
            "a reply older than a change kept"
        );
        n.keep_attr(f, n.epoch(f), a, Instant::now());
        assert_eq!(n.fresh_attr(f, TTL).map(|(a, _)| a.size), Some(7));
        assert!(
            n.fresh_attr(f, Duration::ZERO).is_none(),
            "past the timeout"
        );
        n.looked_up(b"f".to_vec(), &FILE);
        assert!(n.fresh_attr(f, TTL).is_none(), "the kernel got newer ones");
    }
}
