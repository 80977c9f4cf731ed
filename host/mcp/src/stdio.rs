//! The stdio transport's two ends, and knowing at once that the client has gone.
//!
//! MCP clients start a server with pipes (or, from Node, sockets) for its stdin and stdout;
//! those [`open`] hands to tokio's reactor, so a request is read, and its answer written, on
//! the thread that serves them. Tokio's own `stdin()` and `stdout()` — kept for what cannot be
//! polled (a terminal, a file) — do each read and write on a thread of the blocking pool,
//! and waking it and being woken back cost ~0.2 ms a call on this machine. Polling needs the
//! pipes non-blocking, a flag of the open pipe that its other holders (a wrapper script)
//! share, so [`Restore`] puts the flags back when the session ends. Stdout stays with tokio's
//! `stdout()` when stderr is the same pipe (`2>&1`): a non-blocking stderr could turn a
//! diagnostic into a failed write.
//!
//! Stdin, read through [`Watched`], trips [`ClientGone`] at its end, so the calls still running
//! are cancelled then rather than after rmcp's drain period (by which time a client SDK may
//! already have killed the server).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Set once the client's end of stdin is closed (or unreadable).
#[derive(Debug, Default)]
pub(crate) struct ClientGone {
    gone: AtomicBool,
    notify: Notify,
}

impl ClientGone {
    fn trip(&self) {
        self.gone.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether the client has gone.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Returns once the client has gone.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_gone() {
                return;
            }
            notified.await;
        }
    }
}

/// A reader that trips `gone` when it reaches its end or fails.
pub(crate) struct Watched<R> {
    inner: R,
    gone: std::sync::Arc<ClientGone>,
}

impl<R> Watched<R> {
    pub(crate) fn new(inner: R, gone: std::sync::Arc<ClientGone>) -> Self {
        Self { inner, gone }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Watched<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                self.gone.trip();
            }
            Poll::Ready(Err(_)) => self.gone.trip(),
            _ => {}
        }
        polled
    }
}

/// The transport's reading end.
pub(crate) type Input = Box<dyn AsyncRead + Send + Unpin>;
/// The transport's writing end.
pub(crate) type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// Stdin (watched for the client's going) and stdout as the transport's ends, polled where they
/// can be (see the module's docs), with what puts their flags back. Called inside the tokio
/// runtime, which polls them.
pub(crate) fn open(gone: std::sync::Arc<ClientGone>) -> (Watched<Input>, Output, Restore) {
    #[cfg(unix)]
    let (input, output, restore) = {
        let mut restore = Restore::default();
        let input = polled::input(&mut restore);
        (input, polled::output(&mut restore), restore)
    };
    #[cfg(not(unix))]
    let (input, output, restore): (Option<Input>, Option<Output>, _) =
        (None, None, Restore::default());
    let input = input.unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let output = output.unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (Watched::new(input, gone), output, restore)
}

/// The file status flags stdin and stdout had before [`open`] made them non-blocking, put back
/// when dropped.
#[derive(Debug, Default)]
pub(crate) struct Restore {
    #[cfg(unix)]
    flags: Vec<(std::os::fd::OwnedFd, libc::c_int)>,
}

#[cfg(unix)]
impl Restore {
    /// Keeps `fd`'s flags, to put back; `None` when they cannot be read.
    fn keep(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Option<()> {
        let owned = fd.try_clone_to_owned().ok()?;
        let flags = polled::flags(&owned)?;
        self.flags.push((owned, flags));
        Some(())
    }

    /// Puts back the flags kept last, at once: what they were kept for could not be polled
    /// after all, and is read or written as it is.
    fn undo_last(&mut self) {
        if let Some((fd, flags)) = self.flags.pop() {
            polled::set_flags(&fd, flags);
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Last kept, first put back: stdin and stdout may be one socket, whose flags stdout
        // found already changed.
        #[cfg(unix)]
        for (fd, flags) in self.flags.iter().rev() {
            polled::set_flags(fd, *flags);
        }
    }
}

#[cfg(unix)]
mod polled {
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use tokio::net::unix::pipe;

    use super::{Input, Output, Restore};

    /// A pipe or a socket, as far as polling it goes.
    enum Pollable {
        Pipe(OwnedFd),
        Socket(std::os::unix::net::UnixStream),
    }

    /// The file `fd` is open on, as its device and inode.
    fn identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let metadata = file.metadata().ok()?;
        Some((metadata.dev(), metadata.ino()))
    }

    /// A duplicate of `fd` when it is a pipe or a Unix socket (not one of another family) that
    /// stderr is not open on too: a non-blocking stderr could turn a diagnostic into a failed
    /// write. (Stdin and stdout on one file are both polled, or neither: they are alike.)
    fn pollable(fd: BorrowedFd<'_>) -> Option<Pollable> {
        let stderr = identity(std::io::stderr().as_fd());
        if stderr.is_some() && identity(fd) == stderr {
            return None;
        }
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let file_type = file.metadata().ok()?.file_type();
        if file_type.is_fifo() {
            return Some(Pollable::Pipe(file.into()));
        }
        if !file_type.is_socket() {
            return None;
        }
        let socket = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        socket.local_addr().ok()?;
        Some(Pollable::Socket(socket))
    }

    fn socket(socket: std::os::unix::net::UnixStream) -> Option<tokio::net::UnixStream> {
        socket.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(socket).ok()
    }

    /// `fd` polled, its flags kept in `restore` first, and put back at once when it cannot be
    /// (registering it with the reactor failed after it was made non-blocking).
    fn polled<T>(
        fd: BorrowedFd<'_>,
        restore: &mut Restore,
        pipe: impl FnOnce(OwnedFd) -> std::io::Result<T>,
        socket: impl FnOnce(tokio::net::UnixStream) -> T,
    ) -> Option<T> {
        let pollable = pollable(fd)?;
        restore.keep(fd)?;
        let polled = match pollable {
            Pollable::Pipe(fd) => pipe(fd).ok(),
            Pollable::Socket(stream) => self::socket(stream).map(socket),
        };
        if polled.is_none() {
            restore.undo_last();
        }
        polled
    }

    pub(super) fn input(restore: &mut Restore) -> Option<Input> {
        polled(
            std::io::stdin().as_fd(),
            restore,
            |fd| Ok(Box::new(pipe::Receiver::from_owned_fd(fd)?) as Input),
            |stream| Box::new(stream) as Input,
        )
    }

    pub(super) fn output(restore: &mut Restore) -> Option<Output> {
        polled(
            std::io::stdout().as_fd(),
            restore,
            |fd| Ok(Box::new(pipe::Sender::from_owned_fd(fd)?) as Output),
            |stream| Box::new(stream) as Output,
        )
    }

    #[expect(unsafe_code, reason = "fcntl is the way to read a file's status flags")]
    pub(super) fn flags(fd: &OwnedFd) -> Option<libc::c_int> {
        // SAFETY: F_GETFL reads the flags of a descriptor this process owns; it changes
        // nothing and touches no memory.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        (flags >= 0).then_some(flags)
    }

    #[expect(unsafe_code, reason = "fcntl is the way to set a file's status flags")]
    pub(super) fn set_flags(fd: &OwnedFd, flags: libc::c_int) {
        // SAFETY: F_SETFL sets the status flags of a descriptor this process owns to what
        // F_GETFL read from it; it touches no memory.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) };
    }
}
