// nixl_plain: a plain NIXL 1.5.1 user, with no nixl-agent code in it. Tests
// run it bare and under an interposer and compare what it prints.
//
// Build (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
//   g++ -std=c++20 -O1 nixl_plain.cpp -I. -L$NIXL_LIB_DIR -lnixl -lnixl_build
//   (same line) -Wl,-rpath,$NIXL_LIB_DIR -o nixl_plain
// Run:
//   NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins ./nixl_plain ok|seed|stall|hung|config|...|query
//
// Scenarios (argv[1]):
//   ok     agents "A" and "B" in this process, UCX each; 4 x 64 KiB DRAM
//          regions registered on each; A writes its regions into B's with
//          notification "done"; B receives it; everything released. Exit 0.
//   seed   agent "A" registers "kv" (2 x 64 KiB DRAM), then "aux", one DRAM
//          region at address 0: the registration fails, the failure is
//          printed, and the program exits 1 as a serving process dies.
//   stall  B is a forked child (its own agent, UCX, 4 x 64 KiB DRAM, polling
//          its notifications); A, in this process, loads B's metadata
//          through a pipe, stops B with SIGSTOP, then posts a WRITE of 4
//          regions to B and polls getXferStatus for STALL_SECONDS (default
//          20): the transfer stays NIXL_IN_PROG as long as B is stopped (no
//          call blocks: postXferReq and getXferStatus return at once). Then
//          B is killed and A releases everything. Exit 0 if the transfer
//          never completed while B was stopped, 5 if it did.
//   hung   calls that run long on real NIXL (see run_hung): at each HOLD
//          line it waits for a line on stdin, then makes one postXferReq of
//          262,144 descriptors, then one deregisterMem of as many.
//   config agent "A" is made, as the first thing a serving process does; when
//          NIXL throws (its configuration file, say), what it threw is
//          printed and the program exits 1. Exit 0 when the agent is made.
//   fork   a forked child beside agent "A": one that never calls NIXL
//          (`fork files DIR`, `fork helper`) or one that does (`fork nixl`);
//          see run_fork.
//   retry  agent "A" registers "kv", one 1 MiB DRAM region: the first call
//          names address 0 and fails, the retry names the buffer and
//          succeeds; then "aux", one 4 KiB DRAM region. Exit 0.
//   throws agent "A" registers a list of 32,768 descriptors of 64 bytes
//          while this thread may allocate no 1 MiB or more (the replaced
//          operator new below throws std::bad_alloc): NIXL's registerMem
//          throws, and what it threw is printed; then one 4 KiB region
//          registers. Exit 0 when registerMem threw.
//   first  the process's first NIXL call is agent "A"'s constructor on one
//          thread; 200 ms later another thread makes agent "B"; it prints
//          how long B's constructor took ("B took N ms"). Exit 0.
//   query  agent "A" with a UCX and a POSIX backend asks NIXL what it knows
//          of two files (one of 12,345 bytes it wrote, one that is not
//          there) with queryMem three times: with no backend (refused), on
//          UCX (not supported), on POSIX (the first file's size and facts,
//          the second absent). Each prints its status, the errno NIXL left
//          and the answers. Exit 0 when the POSIX query succeeded.
// Exit codes: 0 ok, 1 seed or config failure, 2 usage, 3 a NIXL call failed
// unexpectedly, 4 the notification did not arrive within 10 s, 5 the
// stalled transfer completed.
//
// With HOLD_BEFORE_EXIT=1 the program reads one line from stdin just before
// it exits (after everything else), so a test can look at it alive.
#include "nixl_decls.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <signal.h>
#include <sys/prctl.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

// `throws`: while set, an allocation of 1 MiB or more on this thread throws
// std::bad_alloc, as memory that is not there does. NIXL allocates through
// the program's operator new.
thread_local bool g_starved = false;

void *operator new(std::size_t n) {
    if (g_starved && n >= (std::size_t{1} << 20)) throw std::bad_alloc();
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }

namespace {

constexpr size_t kRegion = 64 * 1024;

[[noreturn]] void finish(int code) {
    std::cout.flush();
    const char *hold = std::getenv("HOLD_BEFORE_EXIT");
    if (hold && std::string(hold) == "1") {
        std::string line;
        std::getline(std::cin, line);
    }
    std::exit(code);
}

void check(nixl_status_t st, const char *what) {
    if (st != NIXL_SUCCESS) {
        std::cout << what << " failed: " << nixlEnumStrings::statusStr(st) << std::endl;
        finish(3);
    }
}

nixlAgent *make_agent(const std::string &name) {
    nixlAgentConfig cfg;
    auto *agent = new nixlAgent(name, cfg);
    nixlBackendH *ucx = nullptr;
    check(agent->createBackend("UCX", nixl_b_params_t{}, ucx), "createBackend");
    return agent;
}

struct Regions {
    std::vector<std::vector<unsigned char>> bufs;
    explicit Regions(size_t n) : bufs(n, std::vector<unsigned char>(kRegion, 0)) {}
    void reg_list(nixlDescList<nixlBlobDesc> &l) const {
        for (auto &b : bufs) {
            nixlBlobDesc d;
            d.addr = reinterpret_cast<uintptr_t>(b.data());
            d.len = b.size();
            d.devId = 0;
            l.addDesc(d);
        }
    }
    void xfer_list(nixlDescList<nixlBasicDesc> &l) const {
        for (auto &b : bufs)
            l.addDesc(nixlBasicDesc{reinterpret_cast<uintptr_t>(b.data()), b.size(), 0});
    }
};

bool has_notif(const nixl_notifs_t &n, const std::string &from, const std::string &msg) {
    auto it = n.find(from);
    if (it == n.end()) return false;
    for (auto &m : it->second)
        if (m == msg) return true;
    return false;
}

int run_ok() {
    nixlAgent *a = make_agent("A");
    nixlAgent *b = make_agent("B");

    Regions ra(4), rb(4);
    for (size_t i = 0; i < ra.bufs.size(); i++)
        for (size_t j = 0; j < kRegion; j++) ra.bufs[i][j] = static_cast<unsigned char>(i * 31 + j);

    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0), lb(DRAM_SEG, 0);
    ra.reg_list(la);
    rb.reg_list(lb);
    check(a->registerMem(la), "registerMem A");
    std::cout << "registered A 4" << std::endl;
    check(b->registerMem(lb), "registerMem B");
    std::cout << "registered B 4" << std::endl;

    std::string md_b, remote;
    check(b->getLocalMD(md_b), "getLocalMD B");
    check(a->loadRemoteMD(md_b, remote), "loadRemoteMD");
    std::cout << "loaded metadata of " << remote << std::endl;

    nixlDescList<nixlBasicDesc> xa(DRAM_SEG, 0), xb(DRAM_SEG, 0);
    ra.xfer_list(xa);
    rb.xfer_list(xb);
    nixlAgentOptionalArgs args;
    args.notifMsg = "done";
    args.hasNotif = true;
    nixlXferReqH *req = nullptr;
    check(a->createXferReq(NIXL_WRITE, xa, xb, "B", req, &args), "createXferReq");

    nixl_status_t st = a->postXferReq(req);
    if (st != NIXL_SUCCESS && st != NIXL_IN_PROG) check(st, "postXferReq");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    nixl_notifs_t notifs;
    // One thread and no progress threads: B's side is progressed by polling
    // its notifications while A's transfer is in flight.
    while ((st = a->getXferStatus(req)) == NIXL_IN_PROG) {
        check(b->getNotifs(notifs), "getNotifs");
        if (std::chrono::steady_clock::now() > deadline) {
            std::cout << "transfer still in progress after 10 s" << std::endl;
            finish(4);
        }
    }
    check(st, "getXferStatus");
    std::cout << "transfer done" << std::endl;

    while (!has_notif(notifs, "A", "done")) {
        check(b->getNotifs(notifs), "getNotifs");
        if (std::chrono::steady_clock::now() > deadline) {
            std::cout << "no notification after 10 s" << std::endl;
            finish(4);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::cout << "notif done" << std::endl;

    bool same = true;
    for (size_t i = 0; i < ra.bufs.size(); i++) same = same && ra.bufs[i] == rb.bufs[i];
    std::cout << (same ? "data verified" : "data MISMATCH") << std::endl;

    check(a->releaseXferReq(req), "releaseXferReq");
    check(a->invalidateRemoteMD("B"), "invalidateRemoteMD");
    check(a->deregisterMem(la), "deregisterMem A");
    check(b->deregisterMem(lb), "deregisterMem B");
    std::cout << "deregistered" << std::endl;
    delete a;
    delete b;
    return same ? 0 : 3;
}

int run_seed() {
    nixlAgent *a = make_agent("A");
    Regions kv(2);
    nixlDescList<nixlBlobDesc> lkv(DRAM_SEG, 0);
    kv.reg_list(lkv);
    check(a->registerMem(lkv), "kv registration");
    std::cout << "registered kv 2" << std::endl;

    nixlDescList<nixlBlobDesc> laux(DRAM_SEG, 0);
    nixlBlobDesc d;
    d.addr = 0;
    d.len = 4096;
    d.devId = 0;
    laux.addDesc(d);
    nixl_status_t st = a->registerMem(laux);
    if (st == NIXL_SUCCESS) {
        std::cout << "aux registration succeeded" << std::endl;
        return 0;
    }
    std::cout << "aux registration failed: " << nixlEnumStrings::statusStr(st) << std::endl;
    // A serving process dies here: no cleanup, as it would not clean up.
    return 1;
}

int run_config() {
    nixlAgentConfig cfg;
    try {
        nixlAgent a("A", cfg);
    } catch (const std::exception &e) {
        std::cout << "agent creation failed: " << e.what() << std::endl;
        return 1;
    }
    std::cout << "agent created" << std::endl;
    return 0;
}

bool write_all(int fd, const void *p, size_t n) {
    auto *c = static_cast<const char *>(p);
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) return false;
        c += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

bool read_all(int fd, void *p, size_t n) {
    auto *c = static_cast<char *>(p);
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r <= 0) return false;
        c += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

// The peer of `stall`: agent B in a forked child. It sends its metadata up
// the pipe and then progresses (polls notifications) until it is stopped and
// killed; it prints nothing, and dies with its parent at the latest.
[[noreturn]] void stall_peer(const Regions &rb, int md_out, int seconds) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    nixlAgent *b = make_agent("B");
    nixlDescList<nixlBlobDesc> lb(DRAM_SEG, 0);
    rb.reg_list(lb);
    if (b->registerMem(lb) != NIXL_SUCCESS) _exit(3);
    std::string md;
    if (b->getLocalMD(md) != NIXL_SUCCESS) _exit(3);
    uint64_t n = md.size();
    if (!write_all(md_out, &n, sizeof n) || !write_all(md_out, md.data(), md.size())) _exit(3);
    close(md_out);
    nixl_notifs_t notifs;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds + 30);
    while (std::chrono::steady_clock::now() < end) {
        b->getNotifs(notifs);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    _exit(0);
}

int run_stall() {
    const char *env = std::getenv("STALL_SECONDS");
    int seconds = env ? std::atoi(env) : 20;
    if (seconds <= 0) seconds = 20;
    std::cout.flush();
    // B's buffers exist before the fork, so they lie at the same addresses
    // in B (the child) as here: A names them in its transfer.
    Regions rb(4);
    int fds[2];
    if (pipe(fds) != 0) return 3;
    // Fork before any NIXL or UCX state exists in this process.
    pid_t peer = fork();
    if (peer < 0) return 3;
    if (peer == 0) {
        close(fds[0]);
        stall_peer(rb, fds[1], seconds);
    }
    close(fds[1]);

    nixlAgent *a = make_agent("A");
    Regions ra(4);
    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0);
    ra.reg_list(la);
    check(a->registerMem(la), "registerMem A");
    std::cout << "registered A 4" << std::endl;

    uint64_t n = 0;
    std::string md;
    bool got = read_all(fds[0], &n, sizeof n);
    if (got) {
        md.resize(n);
        got = read_all(fds[0], md.data(), n);
    }
    close(fds[0]);
    if (!got) {
        std::cout << "peer B sent no metadata" << std::endl;
        kill(peer, SIGKILL);
        waitpid(peer, nullptr, 0);
        return 3;
    }
    std::string remote;
    check(a->loadRemoteMD(md, remote), "loadRemoteMD");
    std::cout << "loaded metadata of " << remote << std::endl;

    kill(peer, SIGSTOP);
    waitpid(peer, nullptr, WUNTRACED);
    std::cout << "stopped B" << std::endl;

    nixlDescList<nixlBasicDesc> xa(DRAM_SEG, 0), xb(DRAM_SEG, 0);
    ra.xfer_list(xa);
    rb.xfer_list(xb);
    nixlAgentOptionalArgs args;
    args.notifMsg = "done";
    args.hasNotif = true;
    nixlXferReqH *req = nullptr;
    check(a->createXferReq(NIXL_WRITE, xa, xb, "B", req, &args), "createXferReq");
    nixl_status_t st = a->postXferReq(req);
    if (st != NIXL_SUCCESS && st != NIXL_IN_PROG) check(st, "postXferReq");
    std::cout << "posted" << std::endl;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (st == NIXL_IN_PROG && std::chrono::steady_clock::now() < end) {
        st = a->getXferStatus(req);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    int code;
    if (st == NIXL_IN_PROG) {
        std::cout << "transfer in progress after " << seconds << " s" << std::endl;
        code = 0;
    } else {
        std::cout << "transfer ended while B was stopped: " << nixlEnumStrings::statusStr(st)
                  << std::endl;
        code = 5;
    }

    // Let go of B while it is still stopped: once it is gone UCX would
    // retry its connection and log (with clocks and ports) what it finds.
    a->releaseXferReq(req);
    check(a->invalidateRemoteMD("B"), "invalidateRemoteMD");
    check(a->deregisterMem(la), "deregisterMem A");
    std::cout << "deregistered" << std::endl;
    delete a;
    kill(peer, SIGKILL);
    waitpid(peer, nullptr, 0);
    std::cout << "killed B" << std::endl;
    return code;
}

// `hung`: calls that run long on real NIXL, for a test to probe while
// they run: A and B each register 262,144 regions of 64 bytes (one list),
// a WRITE of all of them is made; at each `HOLD` line the program waits for
// a line on stdin, then posts the WRITE (one postXferReq of 262,144
// descriptors), then deregisters A's list in one call.
void hold_here() {
    std::cout << "HOLD" << std::endl;
    std::string line;
    std::getline(std::cin, line);
}

int run_hung() {
    constexpr size_t n = 262144, len = 64;
    nixlAgent *a = make_agent("A");
    nixlAgent *b = make_agent("B");
    std::vector<unsigned char> ba(n * len, 7), bb(n * len, 0);
    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0), lb(DRAM_SEG, 0);
    nixlDescList<nixlBasicDesc> xa(DRAM_SEG, 0), xb(DRAM_SEG, 0);
    for (size_t i = 0; i < n; i++) {
        auto pa = reinterpret_cast<uintptr_t>(ba.data() + i * len);
        auto pb = reinterpret_cast<uintptr_t>(bb.data() + i * len);
        nixlBlobDesc da, db;
        da.addr = pa, da.len = len, da.devId = 0;
        db.addr = pb, db.len = len, db.devId = 0;
        la.addDesc(da);
        lb.addDesc(db);
        xa.addDesc(nixlBasicDesc{pa, len, 0});
        xb.addDesc(nixlBasicDesc{pb, len, 0});
    }
    check(a->registerMem(la), "registerMem A");
    check(b->registerMem(lb), "registerMem B");
    std::cout << "registered " << n << std::endl;
    std::string md_b, remote;
    check(b->getLocalMD(md_b), "getLocalMD B");
    check(a->loadRemoteMD(md_b, remote), "loadRemoteMD");
    nixlXferReqH *req = nullptr;
    check(a->createXferReq(NIXL_WRITE, xa, xb, "B", req), "createXferReq");
    hold_here();
    nixl_status_t st = a->postXferReq(req);
    if (st != NIXL_SUCCESS && st != NIXL_IN_PROG) check(st, "postXferReq");
    nixl_notifs_t notifs;
    while ((st = a->getXferStatus(req)) == NIXL_IN_PROG) check(b->getNotifs(notifs), "getNotifs");
    check(st, "getXferStatus");
    std::cout << "transfer done " << (bb == ba ? "verified" : "MISMATCH") << std::endl;
    check(a->releaseXferReq(req), "releaseXferReq");
    hold_here();
    check(a->deregisterMem(la), "deregisterMem A");
    check(b->deregisterMem(lb), "deregisterMem B");
    std::cout << "deregistered" << std::endl;
    delete a;
    delete b;
    return 0;
}

void one_region(nixlDescList<nixlBlobDesc> &l, uintptr_t addr, size_t len) {
    nixlBlobDesc d;
    d.addr = addr;
    d.len = len;
    d.devId = 0;
    l.addDesc(d);
}

int run_retry() {
    nixlAgent *a = make_agent("A");
    std::vector<unsigned char> kv(1 << 20, 0), aux(4096, 0);
    nixlDescList<nixlBlobDesc> at0(DRAM_SEG, 0), lkv(DRAM_SEG, 0), laux(DRAM_SEG, 0);
    one_region(at0, 0, kv.size());
    one_region(lkv, reinterpret_cast<uintptr_t>(kv.data()), kv.size());
    one_region(laux, reinterpret_cast<uintptr_t>(aux.data()), aux.size());
    nixl_status_t st = a->registerMem(at0);
    std::cout << "kv at address 0: " << nixlEnumStrings::statusStr(st) << std::endl;
    check(a->registerMem(lkv), "kv registration");
    std::cout << "registered kv" << std::endl;
    check(a->registerMem(laux), "aux registration");
    std::cout << "registered aux" << std::endl;
    return st == NIXL_SUCCESS ? 3 : 0;
}

int run_throws() {
    constexpr size_t n = 32768, len = 64;
    nixlAgent *a = make_agent("A");
    std::vector<unsigned char> buf(n * len, 0), small(4096, 0);
    nixlDescList<nixlBlobDesc> big(DRAM_SEG, 0), one(DRAM_SEG, 0);
    for (size_t i = 0; i < n; i++) one_region(big, reinterpret_cast<uintptr_t>(buf.data() + i * len), len);
    one_region(one, reinterpret_cast<uintptr_t>(small.data()), small.size());
    bool threw = false;
    g_starved = true;
    try {
        nixl_status_t st = a->registerMem(big);
        g_starved = false;
        std::cout << "registerMem returned " << nixlEnumStrings::statusStr(st) << std::endl;
    } catch (const std::bad_alloc &e) {
        g_starved = false;
        threw = true;
        std::cout << "registerMem threw std::bad_alloc" << std::endl;
    }
    check(a->registerMem(one), "registerMem after the throw");
    std::cout << "registered 1" << std::endl;
    return threw ? 0 : 3;
}

// `fork MODE [DIR]`: agent "A" registers one 64 KiB DRAM region, then the
// process forks a child (MODE says what it does) and waits for it:
//   files DIR  the child never calls NIXL: it closes every fd >= 3 it
//              inherited, opens DIR/file-0 .. DIR/file-11 with fopen, writes
//              20 bytes to each through C stdio and exits with exit(0),
//              which flushes them;
//   nixl       the child makes agent "C" of its own, registers and
//              deregisters one region, and exits with exit(0);
//   helper     the child never calls NIXL: it sleeps (600 s at most) while
//              the parent prints "helper PID" and waits for a line on stdin
//              (a test kills the parent meanwhile).
// The parent prints "child exited N" (files, nixl), deregisters, exits 0.
int run_fork(const std::string &mode, const std::string &dir) {
    nixlAgent *a = make_agent("A");
    Regions ra(1);
    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0);
    ra.reg_list(la);
    check(a->registerMem(la), "registerMem A");
    std::cout << "registered A 1" << std::endl;
    pid_t pid = fork();
    if (pid < 0) {
        std::cout << "fork failed" << std::endl;
        return 3;
    }
    if (pid == 0) {
        if (mode == "files") {
            long most = sysconf(_SC_OPEN_MAX);
            if (most < 0 || most > 65536) most = 65536;
            for (int fd = 3; fd < most; fd++) close(fd);
            for (int i = 0; i < 12; i++) {
                std::string path = dir + "/file-" + std::to_string(i);
                FILE *f = std::fopen(path.c_str(), "w");
                if (!f) _exit(7);
                std::fprintf(f, "file %2d of 12, 20 b\n", i);
            }
            std::exit(0);
        }
        if (mode == "nixl") {
            nixlAgent *c = make_agent("C");
            Regions rc(1);
            nixlDescList<nixlBlobDesc> lc(DRAM_SEG, 0);
            rc.reg_list(lc);
            check(c->registerMem(lc), "registerMem C");
            check(c->deregisterMem(lc), "deregisterMem C");
            delete c;
            std::exit(0);
        }
        sleep(600);
        _exit(0);
    }
    if (mode == "helper") {
        std::cout << "helper " << pid << std::endl;
        std::string line;
        std::getline(std::cin, line);
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (mode != "helper")
        std::cout << "child exited " << (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status))
                  << std::endl;
    check(a->deregisterMem(la), "deregisterMem A");
    delete a;
    return 0;
}

int run_first() {
    std::thread a([] {
        nixlAgentConfig cfg;
        nixlAgent agent("A", cfg);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto t0 = std::chrono::steady_clock::now();
    {
        nixlAgentConfig cfg;
        nixlAgent agent("B", cfg);
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    a.join();
    std::cout << "B took " << ms << " ms" << std::endl;
    return 0;
}

// `query`: what the backends know of two files, as queryMem says.
int run_query() {
    nixlAgentConfig cfg;
    auto *a = new nixlAgent("A", cfg);
    nixlBackendH *ucx = nullptr, *posix = nullptr;
    check(a->createBackend("UCX", nixl_b_params_t{}, ucx), "createBackend UCX");
    check(a->createBackend("POSIX", nixl_b_params_t{}, posix), "createBackend POSIX");
    char path[64], absent[80];
    std::snprintf(path, sizeof path, "/tmp/nixl_plain_query_%d", static_cast<int>(getpid()));
    std::snprintf(absent, sizeof absent, "%s.absent", path);
    FILE *f = std::fopen(path, "w");
    if (!f) return 3;
    for (int i = 0; i < 12345; i++) std::fputc('q', f);
    std::fclose(f);
    nixlDescList<nixlBlobDesc> files(FILE_SEG, 0);
    for (const char *p : {path, absent}) {
        nixlBlobDesc d;
        d.addr = 0;
        d.len = 0;
        d.devId = 0;
        d.metaInfo = p;
        files.addDesc(d);
    }
    auto query = [&](const char *how, nixlBackendH *backend) {
        std::vector<nixl_query_resp_t> resp;
        nixlAgentOptionalArgs args;
        if (backend) args.backends.push_back(backend);
        errno = 0;
        nixl_status_t st = a->queryMem(files, resp, backend ? &args : nullptr);
        int err = errno;
        std::cout << "queryMem " << how << ": " << nixlEnumStrings::statusStr(st) << ", errno " << err << ", "
                  << resp.size() << " answers";
        for (auto &r : resp) {
            if (!r) {
                std::cout << " [absent]";
                continue;
            }
            const char *size = "?";
            for (auto &kv : *r)
                if (kv.first == "size") size = kv.second.c_str();
            std::cout << " [size " << size << ", " << r->size() << " facts]";
        }
        std::cout << std::endl;
        return st;
    };
    query("with no backend", nullptr);
    query("on UCX", ucx);
    nixl_status_t st = query("on POSIX", posix);
    std::remove(path);
    delete a;
    return st == NIXL_SUCCESS ? 0 : 3;
}

} // namespace

int main(int argc, char **argv) {
    std::string scenario = argc > 1 ? argv[1] : "";
    int code;
    if (scenario == "ok") code = run_ok();
    else if (scenario == "seed") code = run_seed();
    else if (scenario == "stall") code = run_stall();
    else if (scenario == "hung") code = run_hung();
    else if (scenario == "config") code = run_config();
    else if (scenario == "fork") code = run_fork(argc > 2 ? argv[2] : "", argc > 3 ? argv[3] : ".");
    else if (scenario == "retry") code = run_retry();
    else if (scenario == "throws") code = run_throws();
    else if (scenario == "first") code = run_first();
    else if (scenario == "query") code = run_query();
    else {
        std::cout << "usage: nixl_plain ok|seed|stall|hung|config|fork|retry|throws|first|query" << std::endl;
        code = 2;
    }
    finish(code);
}
