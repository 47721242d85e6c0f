//! The write connection's log writes, gathered: SQLite writes each frame of its write-ahead log
//! with two calls — the frame's 24-byte header, then the page — so a commit of seven pages made
//! fourteen `pwrite`s, each a trip into the kernel and a page-cache lookup (issue #19: a fifth of
//! an approve cycle's time at `synchronous=NORMAL`). This is SQLite's own "unix" file layer with
//! one difference on log files: the frames of a transaction that does not commit with them wait
//! in memory, and go to the file in one write with the commit frame's header.
//!
//! What stays true, and why:
//! - No commit is visible before all its frames are in the file. SQLite marks a commit in the
//!   frame's header (bytes 4–8: the database's size in pages, zero on other frames); such a
//!   header is never kept back: it goes with every frame before it, and the page after it is
//!   written at once. SQLite publishes frames to readers (the shared-memory index) only after
//!   that page's write returns.
//! - Nothing reads or syncs the log past frames kept back: a read, a sync, a size, a truncation,
//!   a file-control and the close write them first. A write that does not continue them writes
//!   them first, so writes reach the file in the order SQLite made them.
//! - Frames kept back are never a commit, so losing them (the process killed) loses nothing that
//!   was committed — as if SQLite had not written them yet.
//!
//! Only the connection that opens the file with [`NAME`] writes this way; every file is still
//! opened, locked and synced by the "unix" layer, so that connections of this process and others
//! share its locks and its shared memory as before.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name the write connection opens its file with.
pub(crate) const NAME: &str = "nrllm-gathered-log";

/// Frames kept back at most (bytes): past this a long transaction writes what it gathered.
const KEEP_AT_MOST: usize = 256 * 1024;

/// Bytes a write to the "unix" layer may carry: it takes at most 128 KiB − 1 at once.
const MOST_A_WRITE: usize = 96 * 1024;

/// A WAL frame's header: 24 bytes, the commit mark in bytes 4–8.
const FRAME_HEADER: usize = 24;

/// SQLite's "unix" layer, found once.
struct Unix(*mut ffi::sqlite3_vfs);

// SAFETY: SQLite's VFS objects are process-wide and immutable once registered; SQLite calls them
// from any thread.
unsafe impl Send for Unix {}
unsafe impl Sync for Unix {}

static REGISTERED: OnceLock<Result<Unix, String>> = OnceLock::new();

/// Registers the layer with SQLite (once per process); an error says why it could not be.
pub(crate) fn register() -> Result<(), String> {
    REGISTERED
        .get_or_init(|| {
            // SAFETY: sqlite3_vfs_find with a null name returns the default VFS, which lives as
            // long as the process. Our copy is leaked, so it does too.
            unsafe {
                let unix = ffi::sqlite3_vfs_find(std::ptr::null());
                if unix.is_null() {
                    return Err("SQLite has no default file layer".into());
                }
                let mut ours = *unix;
                let name: &'static CStr = Box::leak(
                    std::ffi::CString::new(NAME)
                        .expect("a name without nul")
                        .into_boxed_c_str(),
                );
                ours.zName = name.as_ptr();
                ours.pNext = std::ptr::null_mut();
                ours.szOsFile = c_int::try_from(file_size((*unix).szOsFile))
                    .map_err(|_| "the file object is too large".to_owned())?;
                ours.xOpen = Some(open);
                let ours = Box::leak(Box::new(ours));
                let rc = ffi::sqlite3_vfs_register(ours, 0);
                if rc != ffi::SQLITE_OK {
                    return Err(format!("SQLite refused the file layer (code {rc})"));
                }
                Ok(Unix(unix))
            }
        })
        .as_ref()
        .map(|_| ())
        .map_err(Clone::clone)
}

/// A log file: SQLite's file object first (so that SQLite's pointer is ours), what is kept back,
/// then the "unix" layer's own file object.
#[repr(C)]
struct LogFile {
    base: ffi::sqlite3_file,
    kept: Vec<u8>,
    /// Where `kept` starts in the file.
    at: i64,
    /// Whether `kept` ends with a frame's header that is not a commit's (its page follows).
    header_kept: bool,
    inner: *mut ffi::sqlite3_file,
}

/// Bytes of our file object: ours, then the "unix" file's, aligned.
fn file_size(unix_size: c_int) -> usize {
    inner_offset() + usize::try_from(unix_size).unwrap_or(0)
}

fn inner_offset() -> usize {
    std::mem::size_of::<LogFile>().next_multiple_of(16)
}

fn unix() -> *mut ffi::sqlite3_vfs {
    match REGISTERED.get() {
        Some(Ok(Unix(vfs))) => *vfs,
        _ => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let unix = unix();
    let Some(unix_open) = (!unix.is_null()).then(|| (*unix).xOpen).flatten() else {
        return ffi::SQLITE_CANTOPEN;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Not a log: the "unix" layer's file object, in our space, as if we were not here.
        return unix_open(unix, name, file, flags, out_flags);
    }
    let inner = file
        .cast::<u8>()
        .add(inner_offset())
        .cast::<ffi::sqlite3_file>();
    (*inner).pMethods = std::ptr::null();
    let rc = unix_open(unix, name, inner, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        if let Some(close) = (*inner).pMethods.as_ref().and_then(|m| m.xClose) {
            close(inner);
        }
        (*file).pMethods = std::ptr::null();
        return rc;
    }
    file.cast::<LogFile>().write(LogFile {
        base: ffi::sqlite3_file {
            pMethods: &LOG_METHODS,
        },
        kept: Vec::new(),
        at: 0,
        header_kept: false,
        inner,
    });
    ffi::SQLITE_OK
}

// SAFETY, for every function below: SQLite calls them only with a file object that `open` made
// a `LogFile` (its methods are `LOG_METHODS`), and one call at a time — the file belongs to one
// connection, which one thread uses at a time (the store holds it under a mutex).

/// The "unix" layer's methods of the log file.
unsafe fn inner(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    let inner = (*file.cast::<LogFile>()).inner;
    (inner, &*(*inner).pMethods)
}

/// Writes what is kept back, if anything.
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    let log = file.cast::<LogFile>();
    (*log).header_kept = false;
    if (*log).kept.is_empty() {
        return ffi::SQLITE_OK;
    }
    let mut kept = std::mem::take(&mut (*log).kept);
    let mut rc = ffi::SQLITE_OK;
    let mut at = (*log).at;
    for piece in kept.chunks(MOST_A_WRITE) {
        // At most MOST_A_WRITE bytes: the cast cannot truncate.
        rc = write_inner(file, piece.as_ptr().cast(), piece.len() as c_int, at);
        if rc != ffi::SQLITE_OK {
            break;
        }
        at += piece.len() as i64;
    }
    kept.clear();
    (*log).kept = kept;
    rc
}

/// One write that reaches the file.
unsafe fn write_inner(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    #[cfg(test)]
    tests::WRITES.with(|writes| writes.set(writes.get() + 1));
    let (inner, methods) = inner(file);
    match methods.xWrite {
        Some(write) => write(inner, data, amount, offset),
        None => ffi::SQLITE_IOERR_WRITE,
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let log = file.cast::<LogFile>();
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), usize::try_from(amount).unwrap_or(0));
    let end = (*log).at + (*log).kept.len() as i64;
    if !(*log).kept.is_empty() && end != offset {
        // Not where the frames kept back end: they go first, in the order SQLite wrote them.
        let rc = flush(file);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let header = bytes.len() == FRAME_HEADER;
    let commit = header && bytes[4..8] != [0, 0, 0, 0];
    // Kept back: a header that is not a commit's, and the page that follows such a header.
    let keep = (header && !commit) || (!header && (*log).header_kept);
    if (*log).kept.is_empty() {
        (*log).at = offset;
    }
    if keep && (*log).kept.len() + bytes.len() <= KEEP_AT_MOST {
        (*log).kept.extend_from_slice(bytes);
        (*log).header_kept = header;
        return ffi::SQLITE_OK;
    }
    if (*log).kept.is_empty() {
        return write_inner(file, data, amount, offset);
    }
    // A commit's header (or more than is kept at most): with everything before it, at once.
    (*log).kept.extend_from_slice(bytes);
    flush(file)
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let flushed = flush(file);
    let (inner, methods) = inner(file);
    let closed = methods.xClose.map_or(ffi::SQLITE_OK, |close| close(inner));
    std::ptr::drop_in_place(std::ptr::addr_of_mut!((*file.cast::<LogFile>()).kept));
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

/// What is kept back written first, then `call` with the "unix" layer's log file and methods.
unsafe fn flushed(
    file: *mut ffi::sqlite3_file,
    call: impl FnOnce(*mut ffi::sqlite3_file, &ffi::sqlite3_io_methods) -> c_int,
) -> c_int {
    match flush(file) {
        ffi::SQLITE_OK => {
            let (inner, methods) = inner(file);
            call(inner, methods)
        }
        rc => rc,
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    flushed(file, |inner, methods| {
        methods.xRead.map_or(ffi::SQLITE_IOERR_READ, |read| {
            read(inner, data, amount, offset)
        })
    })
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    flushed(file, |inner, methods| {
        methods
            .xTruncate
            .map_or(ffi::SQLITE_IOERR_TRUNCATE, |truncate| truncate(inner, size))
    })
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    flushed(file, |inner, methods| {
        methods
            .xSync
            .map_or(ffi::SQLITE_IOERR_FSYNC, |sync| sync(inner, flags))
    })
}

unsafe extern "C" fn size(file: *mut ffi::sqlite3_file, out: *mut i64) -> c_int {
    flushed(file, |inner, methods| {
        methods
            .xFileSize
            .map_or(ffi::SQLITE_IOERR_FSTAT, |size| size(inner, out))
    })
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (inner, methods) = inner(file);
    methods
        .xLock
        .map_or(ffi::SQLITE_OK, |lock| lock(inner, level))
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let (inner, methods) = inner(file);
    methods
        .xUnlock
        .map_or(ffi::SQLITE_OK, |unlock| unlock(inner, level))
}

unsafe extern "C" fn reserved(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    let (inner, methods) = inner(file);
    methods
        .xCheckReservedLock
        .map_or(ffi::SQLITE_OK, |check| check(inner, out))
}

unsafe extern "C" fn control(file: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    flushed(file, |inner, methods| {
        methods
            .xFileControl
            .map_or(ffi::SQLITE_NOTFOUND, |control| control(inner, op, arg))
    })
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let (inner, methods) = inner(file);
    methods.xSectorSize.map_or(4096, |sector| sector(inner))
}

unsafe extern "C" fn characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let (inner, methods) = inner(file);
    methods
        .xDeviceCharacteristics
        .map_or(0, |device| device(inner))
}

/// A log file's methods (version 1: a log is neither shared memory nor memory-mapped).
static LOG_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(reserved),
    xFileControl: Some(control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::path::Path;

    use rusqlite::{Connection, OpenFlags};

    use super::*;

    thread_local! {
        /// Writes that reached a log file from this thread.
        pub(crate) static WRITES: Cell<usize> = const { Cell::new(0) };
    }

    fn writes() -> usize {
        WRITES.with(Cell::get)
    }

    fn gathered(path: &Path, synchronous: &str) -> Connection {
        register().unwrap();
        let conn = Connection::open_with_flags_and_vfs(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
            NAME,
        )
        .unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", synchronous)
            .unwrap();
        // The log keeps every frame: the copy below must find each commit in it.
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn
    }

    /// What a connection sees: rows and their bytes.
    fn seen(conn: &Connection) -> (i64, i64) {
        conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM t",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap()
    }

    /// Each commit is visible to another connection — through SQLite's own layer — as soon as it
    /// returns, whatever its size (a few pages, more than is kept back at most) and after
    /// transactions rolled back; and a copy of the file and its log alone (a process killed now:
    /// SQLite rebuilds the index from the log, checking every frame's checksum) holds them all.
    #[test]
    fn every_commit_is_in_the_log_file_when_it_returns() {
        for synchronous in ["NORMAL", "FULL"] {
            commits_are_in_the_log_file(synchronous);
        }
    }

    fn commits_are_in_the_log_file(synchronous: &str) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let writer = gathered(&path, synchronous);
        writer
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            .unwrap();
        let reader = Connection::open(&path).unwrap();
        let mut expected = (0i64, 0i64);
        for i in 0..120usize {
            let size = match i % 10 {
                0 => 600 * 1024,
                1..=4 => 5_000,
                _ => 40,
            };
            writer.execute_batch("BEGIN IMMEDIATE").unwrap();
            for _ in 0..1 + i % 3 {
                writer
                    .execute("INSERT INTO t (body) VALUES (?1)", ["y".repeat(size)])
                    .unwrap();
            }
            if i % 7 == 3 {
                writer.execute_batch("ROLLBACK").unwrap();
            } else {
                writer.execute_batch("COMMIT").unwrap();
                expected.0 += 1 + (i % 3) as i64;
                expected.1 += ((1 + i % 3) * size) as i64;
            }
            assert_eq!(
                seen(&reader),
                expected,
                "{synchronous}: after transaction {i}"
            );
        }
        let copy = dir.path().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::copy(
            dir.path().join("log.db-wal"),
            dir.path().join("copy.db-wal"),
        )
        .unwrap();
        let recovered = Connection::open(&copy).unwrap();
        assert_eq!(seen(&recovered), expected);
        let check: String = recovered
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        drop(writer);
    }

    /// Writes that reached the log for one transaction of 20 rows of 3,000 bytes (~20 pages).
    fn writes_of_a_commit(writer: &Connection) -> usize {
        let before = writes();
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        for _ in 0..20 {
            writer
                .execute("INSERT INTO t (body) VALUES (?1)", ["z".repeat(3_000)])
                .unwrap();
        }
        writer.execute_batch("COMMIT").unwrap();
        writes() - before
    }

    /// The point: a commit of many pages reaches the file in two writes (the frames with the
    /// commit's header, then its page), where SQLite's own layer makes two a page.
    #[test]
    fn a_commit_of_many_pages_is_two_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("few.db");
        let writer = gathered(&path, "NORMAL");
        writer
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            .unwrap();
        let pages_before: i64 = writer
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        let made = writes_of_a_commit(&writer);
        let pages: i64 = writer
            .query_row("PRAGMA page_count", [], |row| row.get(0))
            .unwrap();
        assert!(
            pages - pages_before >= 19,
            "the commit wrote {} pages",
            pages - pages_before
        );
        assert_eq!(made, 2, "writes that reached the log for one commit");
        // After the log starts over (a checkpoint that restarts it), the same, and one more
        // for the log's own header.
        let reader = Connection::open(&path).unwrap();
        reader
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
            .unwrap();
        assert_eq!(
            writes_of_a_commit(&writer),
            3,
            "writes after the log started over"
        );
        assert_eq!(seen(&reader).0, 40);
    }
}
