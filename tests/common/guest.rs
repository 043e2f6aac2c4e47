//! The Linux RDMA peer (docs/PEER.md): a QEMU guest running Debian's kernel (rdma_rxe, ib_cm,
//! rdma_cm) and rdma-core's tools, built by `tools/peer/build-guest.sh`, whose only NIC is a
//! UDP socket on loopback in QEMU's `-netdev socket,udp=…,localaddr=…` format (one Ethernet
//! frame per datagram). Two guests with crossed ports share a wire; a guest pointed at the
//! fabric's UDP port meets the simulated hosts.
//!
//! ```ignore
//! let (a, b) = guest::wire_pair(1, 2);
//! let [a, b] = guest::Guest::boot_all([a, b])?.try_into().unwrap();
//! let server = a.spawn("rping -s -a 198.18.0.1 -C 10")?;
//! a.wait_listening(7174, guest::COMMAND_TIMEOUT)?;
//! let client = b.run("rping -c -a 198.18.0.1 -C 10 -V", guest::COMMAND_TIMEOUT)?;
//! assert_eq!(client.status, 0);
//! assert_eq!(server.wait(guest::COMMAND_TIMEOUT)?.status, 0);
//! ```
//!
//! How it talks to the guest: the first serial port (ttyS0) carries the kernel's console into
//! `console.log` in the guest's run directory; the second (ttyS1, raw, no echo) is the control
//! channel on QEMU's stdio. The guest's init (tools/peer/init) answers with `@@`-tagged lines
//! only, one message at a time, output in base64, so neither kernel messages nor a command's
//! own output can be mistaken for protocol. Every wait here has a deadline and waits on a
//! fact (a line from the guest, QEMU's exit); none sleeps to let something happen.
//!
//! Where things are: QEMU from `$PVRDMA_QEMU`, else `qemu-system-x86_64` on PATH, else
//! `<target>/peer/qemu/bin/qemu-system-x86_64` (`tools/peer/qemu.sh`); the image from
//! `$PVRDMA_PEER_DIR`, else `<target>/peer/guest/current` (`tools/peer/build-guest.sh`).
//! `PVRDMA_PEER_KEEP=1` keeps every run directory (console logs); otherwise only those of a
//! guest dropped while its thread panics are kept.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A guest's boot deadline by default: under TCG on two loaded cores a boot takes 20-40 s.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// A deadline that suits a short command (a tool run, a counter read).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// The NIC socket's receive buffer by default: 8 MiB holds a 1 MiB message's 1024 frames
/// (and a READ's responses beside them) at the kernel's ~2.3 KB per queued datagram.
pub const SOCKET_BUFFER: usize = 8 << 20;
/// How long the guest waits for a reply to be read before it gives up on a request.
const STARTED_TIMEOUT: Duration = Duration::from_secs(60);
/// The rxe counters that count a sequence error, a duplicate or a retransmission: all stay 0
/// on a clean wire (Linux 6.1 drivers/infiniband/sw/rxe/rxe_hw_counters.c).
pub const RXE_SEQUENCE_ERRORS: [&str; 6] = [
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_seq_err",
    "completer_retry_err",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
];

/// What a guest is: its place on the wire and its addresses.
#[derive(Clone, Debug)]
pub struct GuestConfig {
    /// For messages and the run directory's name.
    pub name: String,
    /// QEMU's socket binds 127.0.0.1:`local_udp_port` and receives the wire's frames there.
    pub local_udp_port: u16,
    /// QEMU sends every frame eth0 transmits to 127.0.0.1:`peer_udp_port`.
    pub peer_udp_port: u16,
    /// eth0's MAC (the guest's init checks it).
    pub mac: [u8; 6],
    /// eth0's IPv4 address, from 198.18.0.0/15.
    pub ipv4: Ipv4Addr,
    pub ipv4_prefix: u8,
    /// eth0's IPv6 address, from 2001:2::/48.
    pub ipv6: Ipv6Addr,
    pub ipv6_prefix: u8,
    /// eth0's MTU (rxe's path MTU is the largest IB MTU that fits: 1024 for 1500).
    pub mtu: u16,
    /// Receive buffer of the NIC's UDP socket, in bytes (the harness creates the socket and
    /// hands it to QEMU, `-netdev dgram,local.type=fd`; root may exceed
    /// `net.core.rmem_max`). QEMU's own socket has Linux's default, 208 KiB, about 90 frames:
    /// a longer burst toward the guest is lost there. 0: QEMU's own socket.
    pub socket_buffer: usize,
    pub memory_mib: u32,
    pub boot_timeout: Duration,
    /// The guest powers itself off after this long, so a guest whose host process died
    /// without dropping it (SIGKILL) does not outlive the test by more.
    pub lifetime: Duration,
    /// Every frame eth0 sends and receives, into this pcap file (QEMU's `filter-dump`).
    pub pcap: Option<PathBuf>,
    /// Appended to QEMU's command line.
    pub extra_qemu_args: Vec<String>,
    /// Appended to the kernel's command line (the init ignores what it does not know).
    pub extra_kernel_args: Vec<String>,
    /// The image directory (`vmlinux`, `initrd.img`) instead of [`image_dir`]'s: the SMB
    /// Direct image of tools/peer/build-smbd.sh ([`smbd_image_dir`]).
    pub image: Option<PathBuf>,
}

impl GuestConfig {
    /// Guest `n` (1..=254) on the given ports: 198.18.0.n/15, 2001:2::n/48,
    /// MAC 52:54:00:12:34:n, MTU 1500, 512 MiB.
    pub fn numbered(n: u8, local_udp_port: u16, peer_udp_port: u16) -> GuestConfig {
        GuestConfig {
            name: format!("peer{n}"),
            local_udp_port,
            peer_udp_port,
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, n],
            ipv4: Ipv4Addr::new(198, 18, 0, n),
            ipv4_prefix: 15,
            ipv6: Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(n)),
            ipv6_prefix: 48,
            mtu: 1500,
            socket_buffer: SOCKET_BUFFER,
            memory_mib: 512,
            boot_timeout: BOOT_TIMEOUT,
            lifetime: Duration::from_secs(1800),
            pcap: None,
            extra_qemu_args: Vec::new(),
            extra_kernel_args: Vec::new(),
            image: None,
        }
    }

    pub fn mac_string(&self) -> String {
        let m = self.mac;
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// The descriptor QEMU finds its NIC's socket at.
const NIC_FD: i32 = 200;

mod sys {
    use std::ffi::{c_int, c_void};
    unsafe extern "C" {
        pub fn setsockopt(fd: c_int, level: c_int, name: c_int, v: *const c_void, n: u32) -> c_int;
        pub fn dup2(old: c_int, new: c_int) -> c_int;
    }
    pub const SOL_SOCKET: c_int = 1;
    pub const SO_RCVBUF: c_int = 8;
    pub const SO_RCVBUFFORCE: c_int = 33;
}

/// The guest NIC's socket: bound to its local port, connected to its peer's, with a receive
/// buffer of `config.socket_buffer` (SO_RCVBUFFORCE as root, else SO_RCVBUF, which the
/// kernel caps at `net.core.rmem_max`).
fn nic_socket(config: &GuestConfig) -> Result<UdpSocket> {
    let sock = UdpSocket::bind(("127.0.0.1", config.local_udp_port))
        .map_err(|e| GuestError(format!("bind 127.0.0.1:{}: {e}", config.local_udp_port)))?;
    sock.connect(("127.0.0.1", config.peer_udp_port))
        .map_err(|e| GuestError(format!("connect 127.0.0.1:{}: {e}", config.peer_udp_port)))?;
    let size = i32::try_from(config.socket_buffer).unwrap_or(i32::MAX);
    let set = |name| {
        // SAFETY: a live socket; the value is an int of the size given.
        unsafe {
            sys::setsockopt(
                sock.as_raw_fd(),
                sys::SOL_SOCKET,
                name,
                (&raw const size).cast(),
                4,
            )
        }
    };
    if set(sys::SO_RCVBUFFORCE) != 0 && set(sys::SO_RCVBUF) != 0 {
        return err(format!(
            "SO_RCVBUF {size}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(sock)
}

/// A UDP port on 127.0.0.1 that was free a moment ago (the OS's choice; QEMU binds it next).
pub fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    s.local_addr().expect("local_addr").port()
}

/// Guests `a` and `b` (see [`GuestConfig::numbered`]) on one wire: each sends to the other's
/// port.
pub fn wire_pair(a: u8, b: u8) -> (GuestConfig, GuestConfig) {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    (
        GuestConfig::numbered(a, pa, pb),
        GuestConfig::numbered(b, pb, pa),
    )
}

/// A failure of the rig, with what the guest printed when it matters.
pub struct GuestError(String);

impl fmt::Debug for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for GuestError {}

pub type Result<T> = std::result::Result<T, GuestError>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(GuestError(msg.into()))
}

/// `text` as one shell word.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A finished command: its exit status (128+N when signal N ended it, as the shell reports)
/// and its output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == 0
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status {}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

// ------------------------------------------------------------------------------- locating

/// The cargo target directory of this build.
pub fn target_dir() -> PathBuf {
    if let Some(parent) = option_env!("CARGO_TARGET_TMPDIR").and_then(|t| Path::new(t).parent()) {
        return parent.to_path_buf();
    }
    // Examples and benches: <target>/<profile>/{examples,deps}/<exe>.
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .expect("target directory above the executable")
        .to_path_buf()
}

/// The qemu-system-x86_64 to run (see the module's documentation).
pub fn qemu_path() -> Result<PathBuf> {
    if let Some(q) = std::env::var_os("PVRDMA_QEMU") {
        return Ok(PathBuf::from(q));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let q = dir.join("qemu-system-x86_64");
            if q.is_file() {
                return Ok(q);
            }
        }
    }
    let q = target_dir().join("peer/qemu/bin/qemu-system-x86_64");
    if q.is_file() {
        return Ok(q);
    }
    err(format!(
        "no qemu-system-x86_64 (PVRDMA_QEMU, PATH, {}): run tools/peer/qemu.sh",
        q.display()
    ))
}

/// The directory holding the guest's `vmlinux` (booted through its PVH entry) and
/// `initrd.img`.
pub fn image_dir() -> Result<PathBuf> {
    image_dir_of(
        "PVRDMA_PEER_DIR",
        "peer/guest/current",
        "tools/peer/build-guest.sh",
    )
}

/// The SMB Direct image (ksmbd.ko and cifs.ko with SMB Direct, ksmbd-tools): `$PVRDMA_SMBD_DIR`,
/// else `<target>/peer/smbd/current` (`tools/peer/build-smbd.sh`).
pub fn smbd_image_dir() -> Result<PathBuf> {
    image_dir_of(
        "PVRDMA_SMBD_DIR",
        "peer/smbd/current",
        "tools/peer/build-smbd.sh",
    )
}

fn image_dir_of(var: &str, under_target: &str, script: &str) -> Result<PathBuf> {
    let dir = match std::env::var_os(var) {
        Some(d) => PathBuf::from(d),
        None => target_dir().join(under_target),
    };
    if dir.join("vmlinux").is_file() && dir.join("initrd.img").is_file() {
        Ok(dir)
    } else {
        err(format!(
            "no guest image in {} ({var} or <target>/{under_target}): run {script}",
            dir.display()
        ))
    }
}

// ------------------------------------------------------------------------- the protocol

#[derive(Default)]
struct State {
    ready: Option<String>,
    failed: Option<String>,
    expired: bool,
    /// QEMU closed the control channel: it exited (or was killed).
    gone: bool,
    started: HashMap<u64, u32>,
    done: HashMap<u64, Output>,
    peeks: HashMap<u64, Output>,
    errors: HashMap<u64, String>,
    pongs: HashSet<u64>,
    /// Lines outside the protocol (none expected), the last few kept for error messages.
    noise: Vec<String>,
    qemu_stderr: String,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `f` gives a value, the deadline passes (None) or the guest is gone.
    fn wait<T>(&self, deadline: Instant, mut f: impl FnMut(&mut State) -> Option<T>) -> Option<T> {
        let mut st = self.lock();
        loop {
            if let Some(v) = f(&mut st) {
                return Some(v);
            }
            let now = Instant::now();
            if now >= deadline || st.gone {
                return None;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A block being received: `@@BEGIN kind id rc`, base64 stdout, `@@ERR id`, base64 stderr,
/// `@@END id`.
struct Block {
    peek: bool,
    id: u64,
    status: i32,
    stdout: String,
    stderr: String,
    in_stderr: bool,
}

fn reader_loop(stdout: impl Read, shared: Arc<Shared>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let mut block: Option<Block> = None;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let mut st = shared.lock();
        let Some(at) = text.find("@@") else {
            match block.as_mut() {
                Some(b) if b.in_stderr => b.stderr.push_str(text),
                Some(b) => b.stdout.push_str(text),
                None => {
                    if st.noise.len() == 50 {
                        st.noise.remove(0);
                    }
                    st.noise.push(text.to_string());
                }
            }
            continue;
        };
        let msg = &text[at + 2..];
        let (tag, rest) = msg.split_once(' ').unwrap_or((msg, ""));
        let words: Vec<&str> = rest.split(' ').collect();
        let id = words.first().and_then(|w| w.parse::<u64>().ok());
        match (tag, id) {
            ("READY", _) => st.ready = Some(rest.to_string()),
            ("FAIL", _) => st.failed = Some(rest.to_string()),
            ("EXPIRED", _) => st.expired = true,
            ("STARTED", Some(id)) => {
                let pid = words.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
                st.started.insert(id, pid);
            }
            ("BEGIN", _) => {
                // "@@BEGIN done|peek ID RC"
                block = Some(Block {
                    peek: words.first() == Some(&"peek"),
                    id: words
                        .get(1)
                        .and_then(|w| w.parse().ok())
                        .unwrap_or(u64::MAX),
                    status: words.get(2).and_then(|w| w.parse().ok()).unwrap_or(-1),
                    stdout: String::new(),
                    stderr: String::new(),
                    in_stderr: false,
                });
            }
            ("ERR", Some(id)) => {
                if let Some(b) = block.as_mut().filter(|b| b.id == id) {
                    b.in_stderr = true;
                }
            }
            ("END", Some(id)) => {
                if let Some(b) = block.take().filter(|b| b.id == id) {
                    let out = Output {
                        status: b.status,
                        stdout: base64_text(&b.stdout),
                        stderr: base64_text(&b.stderr),
                    };
                    if b.peek {
                        st.peeks.insert(id, out);
                    } else {
                        st.done.insert(id, out);
                    }
                }
            }
            ("PONG", Some(id)) => {
                st.pongs.insert(id);
            }
            ("ERROR", Some(id)) => {
                st.errors.insert(id, words[1..].join(" "));
            }
            _ => st.noise.push(text.to_string()),
        }
        drop(st);
        shared.changed.notify_all();
    }
    shared.lock().gone = true;
    shared.changed.notify_all();
}

/// Decodes the guest's base64 (busybox wraps it at 76 columns; the reader joined the lines).
pub fn base64_text(b64: &str) -> String {
    let mut out = Vec::with_capacity(b64.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in b64.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue, // '=' padding, stray whitespace
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------- Guest

static RUN_SEQ: AtomicU64 = AtomicU64::new(0);

/// A running guest. Dropping it kills QEMU.
pub struct Guest {
    config: GuestConfig,
    child: Mutex<Option<Child>>,
    stdin: Mutex<Option<ChildStdin>>,
    shared: Arc<Shared>,
    readers: Vec<JoinHandle<()>>,
    run_dir: PathBuf,
    next_id: AtomicU64,
    boot_time: Duration,
}

impl Guest {
    /// Boots a guest and waits (up to `config.boot_timeout`) for its init to report eth0 and
    /// rxe0 up. The error of a failed or timed-out boot carries the console's tail.
    pub fn boot(config: GuestConfig) -> Result<Guest> {
        let qemu = qemu_path()?;
        let image = match &config.image {
            Some(d) => d.clone(),
            None => image_dir()?,
        };
        let seq = RUN_SEQ.fetch_add(1, Ordering::Relaxed);
        let run_dir = target_dir().join("tmp/peer-guests").join(format!(
            "{}-{}-{}",
            config.name,
            std::process::id(),
            seq
        ));
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| GuestError(format!("create {}: {e}", run_dir.display())))?;
        let mut nic: Option<UdpSocket> = None;
        let mut append = format!(
            "console=ttyS0 quiet panic=-1 peer.ipv4={}/{} peer.ipv6={}/{} peer.mac={} peer.mtu={} \
             peer.life={} peer.ctl=ttyS1",
            config.ipv4,
            config.ipv4_prefix,
            config.ipv6,
            config.ipv6_prefix,
            config.mac_string(),
            config.mtu,
            config.lifetime.as_secs(),
        );
        for a in &config.extra_kernel_args {
            append.push(' ');
            append.push_str(a);
        }
        let mut cmd = Command::new(&qemu);
        let netdev = if config.socket_buffer == 0 {
            format!(
                "socket,id=n0,udp=127.0.0.1:{},localaddr=127.0.0.1:{}",
                config.peer_udp_port, config.local_udp_port
            )
        } else {
            let sock = nic_socket(&config)?;
            let fd = sock.as_raw_fd();
            let dup = move || {
                // SAFETY: dup2 on a descriptor this process owns. The new descriptor has no
                // FD_CLOEXEC, so QEMU inherits it as NIC_FD.
                if unsafe { sys::dup2(fd, NIC_FD) } < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            };
            // SAFETY: `dup` runs between fork and exec and calls only dup2
            // (async-signal-safe); `sock` outlives the spawn below.
            unsafe { cmd.pre_exec(dup) };
            nic = Some(sock);
            format!("dgram,id=n0,local.type=fd,local.str={NIC_FD}")
        };
        cmd.args(["-machine", "pc", "-cpu", "max", "-smp", "1"])
            .args(["-m", &config.memory_mib.to_string()])
            .args([
                "-nodefaults",
                "-no-user-config",
                "-display",
                "none",
                "-vga",
                "none",
            ])
            .arg("-no-reboot")
            .args([
                "-chardev",
                &format!("file,id=con,path={}", run_dir.join("console.log").display()),
            ])
            .args(["-serial", "chardev:con"])
            .args([
                "-chardev",
                "stdio,id=ctl,signal=off",
                "-serial",
                "chardev:ctl",
            ])
            .args(["-netdev", &netdev])
            .args([
                "-device",
                &format!(
                    "virtio-net-pci,netdev=n0,mac={},romfile=",
                    config.mac_string()
                ),
            ])
            .args(["-kernel", &image.join("vmlinux").display().to_string()])
            .args(["-initrd", &image.join("initrd.img").display().to_string()])
            .args(["-append", &append]);
        if let Some(pcap) = &config.pcap {
            cmd.args([
                "-object",
                &format!("filter-dump,id=dump0,netdev=n0,file={}", pcap.display()),
            ]);
        }
        cmd.args(&config.extra_qemu_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::fs::write(run_dir.join("command.txt"), format!("{cmd:?}\n")).ok();
        let started = Instant::now();
        let mut child = cmd.spawn().map_err(|e| {
            GuestError(format!(
                "{}: cannot start {}: {e}",
                config.name,
                qemu.display()
            ))
        })?;
        // QEMU has its own descriptor of the NIC's socket now.
        drop(nic);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let mut stderr = child.stderr.take().expect("piped stderr");
        let stdin = child.stdin.take();
        let mut readers = Vec::new();
        let s = shared.clone();
        readers.push(std::thread::spawn(move || reader_loop(stdout, s)));
        let s = shared.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                s.lock()
                    .qemu_stderr
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }));
        let mut guest = Guest {
            config,
            child: Mutex::new(Some(child)),
            stdin: Mutex::new(stdin),
            shared,
            readers,
            run_dir,
            next_id: AtomicU64::new(1),
            boot_time: Duration::ZERO,
        };
        let deadline = started + guest.config.boot_timeout;
        let outcome = guest.shared.wait(deadline, |st| {
            if st.ready.is_some() {
                Some(Ok(()))
            } else {
                st.failed.clone().map(Err)
            }
        });
        match outcome {
            Some(Ok(())) => {
                guest.boot_time = started.elapsed();
                Ok(guest)
            }
            Some(Err(why)) => Err(guest.failure(&format!("boot failed in the guest: {why}"))),
            None if guest.shared.lock().gone => Err(guest.failure("QEMU exited during boot")),
            None => Err(guest.failure(&format!(
                "not ready after {:?} (boot timeout)",
                guest.config.boot_timeout
            ))),
        }
    }

    /// Boots every guest at once (they boot in parallel) and waits for all.
    pub fn boot_all<I: IntoIterator<Item = GuestConfig>>(configs: I) -> Result<Vec<Guest>> {
        let handles: Vec<_> = configs
            .into_iter()
            .map(|c| std::thread::spawn(move || Guest::boot(c)))
            .collect();
        let results: Vec<Result<Guest>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| err("a boot thread panicked")))
            .collect();
        results.into_iter().collect()
    }

    pub fn config(&self) -> &GuestConfig {
        &self.config
    }

    /// From QEMU's start to the guest's readiness.
    pub fn boot_time(&self) -> Duration {
        self.boot_time
    }

    /// The kernel's console so far.
    pub fn console_log(&self) -> String {
        std::fs::read(self.run_dir.join("console.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The run directory (console.log, command.txt).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// QEMU is running and the guest has not powered off.
    pub fn is_alive(&self) -> bool {
        !self.shared.lock().gone
    }

    /// An error message naming the guest, with QEMU's stderr and the console's last lines.
    fn failure(&self, what: &str) -> GuestError {
        let console = self.console_log();
        let lines: Vec<&str> = console.lines().collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        let st = self.shared.lock();
        GuestError(format!(
            "guest {} ({}): {what}\n--- QEMU stderr\n{}--- control channel noise\n{}\n--- \
             console (last 40 lines; {})\n{tail}",
            self.config.name,
            self.config.ipv4,
            st.qemu_stderr,
            st.noise.join("\n"),
            self.run_dir.join("console.log").display(),
        ))
    }

    fn request(&self, line: &str) -> Result<()> {
        let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pipe) = stdin.as_mut() else {
            return Err(self.failure("the guest was killed"));
        };
        pipe.write_all(line.as_bytes())
            .and_then(|()| pipe.write_all(b"\n"))
            .and_then(|()| pipe.flush())
            .map_err(|e| self.failure(&format!("write to the control channel: {e}")))
    }

    /// Starts `cmd` (a `sh -c` command line, no newline) in the guest, in its own session,
    /// stdin /dev/null, and returns once the guest has started it.
    pub fn spawn(&self, cmd: &str) -> Result<Job<'_>> {
        if cmd.contains(['\n', '\r']) {
            return err(format!("a command is one line: {cmd:?}"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.request(&format!("run {id} {cmd}"))?;
        let started = self.shared.wait(Instant::now() + STARTED_TIMEOUT, |st| {
            st.started.get(&id).copied()
        });
        match started {
            Some(pid) => Ok(Job {
                guest: self,
                id,
                pid,
                cmd: cmd.to_string(),
                collected: false,
            }),
            None => Err(self.failure(&format!("`{cmd}` did not start"))),
        }
    }

    /// Runs `cmd` to its end (killed, and an error, past `timeout`).
    pub fn run(&self, cmd: &str, timeout: Duration) -> Result<Output> {
        self.spawn(cmd)?.wait(timeout)
    }

    /// Runs `cmd` and fails unless it exits 0.
    pub fn run_ok(&self, cmd: &str, timeout: Duration) -> Result<Output> {
        let out = self.run(cmd, timeout)?;
        if out.success() {
            Ok(out)
        } else {
            err(format!("guest {}: `{cmd}` failed: {out}", self.config.name))
        }
    }

    /// A round trip through the command server.
    pub fn ping(&self, timeout: Duration) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.request(&format!("ping {id}"))?;
        match self.shared.wait(Instant::now() + timeout, |st| {
            st.pongs.remove(&id).then_some(())
        }) {
            Some(()) => Ok(()),
            None => Err(self.failure("no answer to ping")),
        }
    }

    /// Waits until an rdma_cm ID listens on `port` (any address), as `rdma resource show
    /// cm_id` reports it: the fact a client's connect needs.
    pub fn wait_listening(&self, port: u16, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let suffix = format!(":{port}");
        // Polled in the guest, so one request covers the whole wait.
        let tenths = timeout.as_millis().div_ceil(100).max(1);
        let cmd = format!(
            "n={tenths}; until rdma resource show cm_id | grep 'state LISTEN' | grep -q -- \
             '{suffix}\\( \\|$\\)'; do n=$((n-1)); [ $n -gt 0 ] || exit 1; usleep 100000; done"
        );
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(30);
        let out = self.run(&cmd, left)?;
        if out.success() {
            Ok(())
        } else {
            let now = self
                .run("rdma resource show cm_id", COMMAND_TIMEOUT)
                .unwrap_or_default();
            err(format!(
                "guest {}: nothing listens on port {port} after {timeout:?}; cm_ids:\n{}",
                self.config.name, now.stdout
            ))
        }
    }

    /// rxe0 port 1's counters (`rdma statistic show link rxe0/1`).
    pub fn rdma_counters(&self) -> Result<BTreeMap<String, u64>> {
        let out = self.run_ok("rdma statistic show link rxe0/1", COMMAND_TIMEOUT)?;
        parse_rdma_statistic(&out.stdout)
            .ok_or_else(|| GuestError(format!("cannot parse rdma statistic: {:?}", out.stdout)))
    }

    /// The peer vanishes: QEMU is killed at once (SIGKILL), no shutdown, no DREQ.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
        // The reader sees EOF now that QEMU is gone; `gone` follows.
        self.shared
            .wait(Instant::now() + Duration::from_secs(10), |st| {
                st.gone.then_some(())
            });
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.kill();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let keep = std::thread::panicking() || std::env::var_os("PVRDMA_PEER_KEEP").is_some();
        if !keep {
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}

/// `rdma statistic show link DEV/PORT` output: "link rxe0/1 name value name value ...".
pub fn parse_rdma_statistic(text: &str) -> Option<BTreeMap<String, u64>> {
    let mut words = text.split_whitespace();
    if words.next()? != "link" {
        return None;
    }
    words.next()?;
    let rest: Vec<&str> = words.collect();
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return None;
    }
    rest.chunks(2)
        .map(|kv| Some((kv[0].to_string(), kv[1].parse().ok()?)))
        .collect()
}

/// `after - before` for every counter of `after`.
pub fn counter_delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// A command running in a guest. Dropped before its end is collected, it is killed.
pub struct Job<'g> {
    guest: &'g Guest,
    id: u64,
    pid: u32,
    cmd: String,
    collected: bool,
}

impl Job<'_> {
    /// Its process (and process group) ID in the guest.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it has finished (without waiting).
    pub fn finished(&self) -> bool {
        self.guest.shared.lock().done.contains_key(&self.id)
    }

    /// Waits for its end and its output; past `timeout` it is killed and this is an error
    /// carrying what it had printed.
    pub fn wait(mut self, timeout: Duration) -> Result<Output> {
        let id = self.id;
        if let Some(out) = self
            .guest
            .shared
            .wait(Instant::now() + timeout, |st| st.done.remove(&id))
        {
            self.collected = true;
            return Ok(out);
        }
        if !self.guest.is_alive() {
            self.collected = true;
            return Err(self
                .guest
                .failure(&format!("the guest died while `{}` ran", self.cmd)));
        }
        let partial = self.peek(COMMAND_TIMEOUT).unwrap_or_default();
        let _ = self.signal("KILL");
        let _ = self
            .guest
            .shared
            .wait(Instant::now() + COMMAND_TIMEOUT, |st| st.done.remove(&id));
        self.collected = true;
        err(format!(
            "guest {}: `{}` still ran after {timeout:?} (killed); its output so far:\n{partial}",
            self.guest.config.name, self.cmd
        ))
    }

    /// What it has printed so far (status -1).
    pub fn peek(&self, timeout: Duration) -> Result<Output> {
        let id = self.id;
        self.guest.shared.lock().peeks.remove(&id);
        self.guest.request(&format!("peek {id}"))?;
        let got = self.guest.shared.wait(Instant::now() + timeout, |st| {
            if let Some(out) = st.peeks.remove(&id) {
                return Some(Ok(out));
            }
            if let Some(e) = st.errors.remove(&id) {
                // Finished between the request and the peek: its full output is the answer.
                return Some(st.done.get(&id).cloned().ok_or(e));
            }
            None
        });
        match got {
            Some(Ok(out)) => Ok(out),
            Some(Err(e)) => err(format!("peek `{}`: {e}", self.cmd)),
            None => Err(self
                .guest
                .failure(&format!("no answer to peek `{}`", self.cmd))),
        }
    }

    /// Waits until its stdout contains `needle` (a fixed string), then returns its output so
    /// far; an error if it ends first or `timeout` passes. The guest polls its own output file,
    /// so the wait costs one request.
    pub fn wait_for_stdout(&self, needle: &str, timeout: Duration) -> Result<Output> {
        let tenths = timeout.as_millis().div_ceil(100).max(1);
        let (id, q) = (self.id, shell_quote(needle));
        let cmd = format!(
            "n={tenths}; until grep -qF -- {q} /run/jobs/{id}.out; do [ -e /run/jobs/{id}.pid ] \
             || exit 2; n=$((n-1)); [ $n -gt 0 ] || exit 1; usleep 100000; done"
        );
        let polled = self.guest.run(&cmd, timeout + Duration::from_secs(30))?;
        if polled.success() {
            return self.peek(COMMAND_TIMEOUT);
        }
        let id = self.id;
        // It ended: its output is (or is about to be) with the reader.
        let done = self
            .guest
            .shared
            .wait(Instant::now() + COMMAND_TIMEOUT, |st| {
                st.done.get(&id).cloned()
            });
        match done {
            Some(out) if out.stdout.contains(needle) => Ok(out),
            Some(out) => err(format!(
                "`{}` ended without printing {needle:?}: {out}",
                self.cmd
            )),
            None if polled.status == 1 => {
                let out = self.peek(COMMAND_TIMEOUT).unwrap_or_default();
                err(format!(
                    "`{}` did not print {needle:?} in {timeout:?}: {out}",
                    self.cmd
                ))
            }
            None => Err(self.guest.failure(&format!("`{}` vanished", self.cmd))),
        }
    }

    /// Sends signal `sig` (a name: TERM, INT, KILL...) to its process group.
    pub fn signal(&self, sig: &str) -> Result<()> {
        self.guest.request(&format!("kill {} {sig}", self.id))
    }
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        if !self.collected && self.guest.is_alive() {
            let _ = self.signal("KILL");
            let id = self.id;
            let _ = self
                .guest
                .shared
                .wait(Instant::now() + Duration::from_secs(30), |st| {
                    st.done.remove(&id)
                });
        }
    }
}
