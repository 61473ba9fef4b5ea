// nixl_stress: a plain NIXL 1.5.1 user under load, with no nixl-agent code
// in it. tests/interposer.rs runs it under the interposer and compares the
// counts it prints with what /metrics recorded (docs/reliability.md).
//
// Build (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
//   g++ -std=c++20 -O1 -pthread nixl_stress.cpp -I. -L$NIXL_LIB_DIR -lnixl
//   (same line) -lnixl_build -Wl,-rpath,$NIXL_LIB_DIR -o nixl_stress
// Run:
//   NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins ./nixl_stress SECONDS [options]
//
// For SECONDS (default: STRESS_SECONDS, else 10), in one process:
// - agents "A" and "B" (UCX, thread sync RW), 16 DRAM regions registered on
//   each in one call, A holding B's metadata;
// - 16 threads, each WRITEing its own region of A (4 KiB to 64 KiB) into
//   its own region of B, over and over, and polling getXferStatus until
//   done; by thread number mod 3 a new createXferReq a transfer, a new
//   makeXferReq over lists prepared once (prepXferDlist), or one
//   createXferReq reposted; each posting is polled by the thread that
//   posted it, and the first bytes of the target are checked;
// - one thread that creates an agent "C<n>" (UCX), registers two regions
//   on it in two calls, deregisters them, destroys it, and registers and
//   deregisters a scratch region on A, again and again;
// - one thread polling B's notifications (it and the churn thread pause
//   with the transfer threads);
// - the main thread forks, from 25 % to 75 % of the time every 2 s, a child
//   that calls no NIXL: it writes a file in --child-dir and leaves with
//   _exit (as Python's multiprocessing does); the parent
//   waits for it and checks the file. At 50 % the transfer threads are
//   paused between two transfers and one child that does call NIXL is
//   forked: its own agent "F" (POSIX), one region registered and
//   deregistered (unless --no-nixl-child).
// With --cross-poll two more threads form a pair: one creates and posts
// requests, the other polls each from the moment the post starts (the
// cross-thread pattern; NIXL allows it under RW), off by default.
//
// At the end everything is released and deregistered, and one JSON line
// gives the counts: postings, completions, bytes of completed transfers
// (the local descriptors' lengths), registerMem and deregisterMem calls of
// this process (the children's are their own), agents created, forks.
// Exit codes: 0 ok, 2 usage, 3 a NIXL call failed unexpectedly, 4 a
// transfer stayed in progress 30 s, 5 data mismatch, 6 a child failed.
//
// With HOLD_BEFORE_EXIT=1 the program reads one line from stdin just before
// it exits (after printing the counts), so a test can look at it alive.
#include "nixl_decls.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <mutex>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kThreads = 16;

struct Counts {
    std::atomic<uint64_t> posted{0}, completed{0}, bytes{0}, polls{0};
    std::atomic<uint64_t> registrations{0}, deregistrations{0};
    std::atomic<uint64_t> agents_created{0}, agents_destroyed{0};
    std::atomic<uint64_t> notif_polls{0};
    std::atomic<uint64_t> cross_posted{0}, cross_completed{0}, cross_bytes{0};
} counts;

std::atomic<bool> stop{false};
// Pause of the transfer threads around the NIXL child's fork.
std::mutex pause_mu;
std::condition_variable pause_cv;
bool pause_wanted = false;
int paused = 0;
int pausable = 0; // threads that call pause_point

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
    cfg.syncMode = nixl_thread_sync_t::RW;
    auto *agent = new nixlAgent(name, cfg);
    nixlBackendH *ucx = nullptr;
    check(agent->createBackend("UCX", nixl_b_params_t{}, ucx), "createBackend");
    counts.agents_created++;
    return agent;
}

void destroy_agent(nixlAgent *a) {
    delete a;
    counts.agents_destroyed++;
}

void reg(nixlAgent *a, const nixlDescList<nixlBlobDesc> &l, const char *what) {
    counts.registrations++;
    check(a->registerMem(l), what);
}

void dereg(nixlAgent *a, const nixlDescList<nixlBlobDesc> &l, const char *what) {
    counts.deregistrations++;
    check(a->deregisterMem(l), what);
}

void blob(nixlDescList<nixlBlobDesc> &l, const void *p, size_t len) {
    nixlBlobDesc d;
    d.addr = reinterpret_cast<uintptr_t>(p);
    d.len = len;
    d.devId = 0;
    l.addDesc(d);
}

void basic(nixlDescList<nixlBasicDesc> &l, const void *p, size_t len) {
    l.addDesc(nixlBasicDesc{reinterpret_cast<uintptr_t>(p), len, 0});
}

size_t region_len(int t) { return size_t{4096} << (t % 5); }

// Between two transfers: wait here while the main thread forks the NIXL child.
void pause_point() {
    std::unique_lock<std::mutex> l(pause_mu);
    if (!pause_wanted) return;
    paused++;
    pause_cv.notify_all();
    pause_cv.wait(l, [] { return !pause_wanted; });
    paused--;
}

// Posts `req` and polls it on this thread until it is done; counts it.
void post_and_wait(const nixlAgent *a, nixlXferReqH *req, size_t len) {
    counts.posted++;
    nixl_status_t st = a->postXferReq(req);
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (st == NIXL_IN_PROG) {
        if (Clock::now() > deadline) {
            std::cout << "transfer still in progress after 30 s" << std::endl;
            finish(4);
        }
        std::this_thread::yield();
        counts.polls++;
        st = a->getXferStatus(req);
    }
    check(st, "transfer");
    counts.completed++;
    counts.bytes += len;
}

void transfer_thread(const nixlAgent *a, int t, unsigned char *src, unsigned char *dst) {
    const size_t len = region_len(t);
    const int mode = t % 3;
    nixlDescList<nixlBasicDesc> xs(DRAM_SEG, 0), xd(DRAM_SEG, 0);
    basic(xs, src, len);
    basic(xd, dst, len);
    nixlDlistH *ls = nullptr, *ld = nullptr;
    nixlXferReqH *kept = nullptr;
    if (mode == 1) {
        check(a->prepXferDlist(xs, ls), "prepXferDlist local");
        check(a->prepXferDlist("B", xd, ld), "prepXferDlist B");
    } else if (mode == 2) {
        check(a->createXferReq(NIXL_WRITE, xs, xd, "B", kept), "createXferReq");
    }
    const std::vector<int> idx{0};
    for (uint64_t n = 1; !stop.load(std::memory_order_relaxed); n++) {
        pause_point();
        const auto mark = static_cast<unsigned char>(t * 16 + n);
        src[0] = mark;
        src[len - 1] = mark;
        nixlXferReqH *req = kept;
        if (mode == 0) check(a->createXferReq(NIXL_WRITE, xs, xd, "B", req), "createXferReq");
        if (mode == 1) check(a->makeXferReq(NIXL_WRITE, ls, idx, ld, idx, req), "makeXferReq");
        post_and_wait(a, req, len);
        if (dst[0] != mark || dst[len - 1] != mark) {
            std::cout << "thread " << t << ": data mismatch" << std::endl;
            finish(5);
        }
        if (mode != 2) check(a->releaseXferReq(req), "releaseXferReq");
    }
    if (kept) check(a->releaseXferReq(kept), "releaseXferReq");
    if (ls) check(a->releasedDlistH(ls), "releasedDlistH");
    if (ld) check(a->releasedDlistH(ld), "releasedDlistH");
}

// --cross-poll: the poster creates and posts, the poller polls each posting
// from the moment its post starts; the first to see it done counts it.
struct Cross {
    std::mutex mu;
    std::condition_variable cv;
    nixlXferReqH *req = nullptr; // published just before the post
    bool post_returned = false;
    nixl_status_t post_status = NIXL_IN_PROG;
    bool done = false; // the poller let go of `req`
    nixl_status_t poll_status = NIXL_IN_PROG;
    bool poster_exited = false;
} cross;

void cross_poster(const nixlAgent *a, unsigned char *src, unsigned char *dst, size_t len) {
    nixlDescList<nixlBasicDesc> xs(DRAM_SEG, 0), xd(DRAM_SEG, 0);
    basic(xs, src, len);
    basic(xd, dst, len);
    while (!stop.load(std::memory_order_relaxed)) {
        pause_point();
        nixlXferReqH *req = nullptr;
        check(a->createXferReq(NIXL_WRITE, xs, xd, "B", req), "createXferReq (cross)");
        {
            std::lock_guard<std::mutex> l(cross.mu);
            cross.req = req;
            cross.post_returned = false;
            cross.post_status = NIXL_IN_PROG;
            cross.done = false;
            cross.poll_status = NIXL_IN_PROG;
        }
        cross.cv.notify_all();
        counts.cross_posted++;
        nixl_status_t st = a->postXferReq(req);
        {
            std::unique_lock<std::mutex> l(cross.mu);
            cross.post_returned = true;
            cross.post_status = st;
            cross.cv.notify_all();
            // The poller may be inside getXferStatus: wait until it let go.
            cross.cv.wait(l, [] { return cross.done; });
            if (st == NIXL_IN_PROG) st = cross.poll_status;
            cross.req = nullptr;
        }
        check(st, "transfer (cross)");
        counts.cross_completed++;
        counts.cross_bytes += len;
        check(a->releaseXferReq(req), "releaseXferReq (cross)");
    }
    std::lock_guard<std::mutex> l(cross.mu);
    cross.poster_exited = true;
    cross.cv.notify_all();
}

void cross_poller(const nixlAgent *a) {
    for (;;) {
        nixlXferReqH *req;
        {
            std::unique_lock<std::mutex> l(cross.mu);
            cross.cv.wait(l, [] { return cross.poster_exited || (cross.req && !cross.done); });
            if (cross.poster_exited) return;
            req = cross.req;
        }
        // Poll from before the post returns until it is seen to end.
        for (;;) {
            nixl_status_t st = a->getXferStatus(req);
            std::lock_guard<std::mutex> l(cross.mu);
            if (cross.post_returned && (cross.post_status != NIXL_IN_PROG || st != NIXL_IN_PROG)) {
                cross.poll_status = st;
                cross.done = true;
                break;
            }
        }
        cross.cv.notify_all();
    }
}

void notif_thread(nixlAgent *b) {
    nixl_notifs_t notifs;
    while (!stop.load(std::memory_order_relaxed)) {
        pause_point();
        check(b->getNotifs(notifs), "getNotifs");
        counts.notif_polls++;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void churn_thread(nixlAgent *a) {
    std::vector<unsigned char> r1(8192, 1), r2(16384, 2), scratch(32768, 3);
    for (int n = 0; !stop.load(std::memory_order_relaxed); n++) {
        pause_point();
        nixlAgent *c = make_agent("C" + std::to_string(n));
        nixlDescList<nixlBlobDesc> l1(DRAM_SEG, 0), l2(DRAM_SEG, 0);
        blob(l1, r1.data(), r1.size());
        blob(l2, r2.data(), r2.size());
        reg(c, l1, "registerMem C 1");
        reg(c, l2, "registerMem C 2");
        nixlDescList<nixlBlobDesc> ls(DRAM_SEG, 0);
        blob(ls, scratch.data(), scratch.size());
        reg(a, ls, "registerMem A scratch");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        dereg(c, l2, "deregisterMem C 2");
        dereg(c, l1, "deregisterMem C 1");
        dereg(a, ls, "deregisterMem A scratch");
        destroy_agent(c);
    }
}

// The child that never calls NIXL: a file, then exit.
[[noreturn]] void plain_child(const std::string &path, int n) {
    std::string text = "child " + std::to_string(n) + "\n";
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0) close(fd);
    // _exit, as Python's multiprocessing ends a forked child: exit() would
    // run NIXL's and UCX's static destructors with the parent's other
    // threads frozen wherever they were (bare, that hangs).
    _exit(ok ? 0 : 1);
}

// The child that calls NIXL: an agent of its own, one region. Its backend
// is POSIX: UCX's createBackend hangs in a child forked from a process
// whose UCX is busy (bare, on a futex), and so does exit() (static
// destructors), so it ends with _exit too.
[[noreturn]] void nixl_child() {
    std::vector<unsigned char> r(65536, 9);
    nixlAgentConfig cfg;
    auto *f = new nixlAgent("F", cfg);
    nixlBackendH *posix = nullptr;
    if (f->createBackend("POSIX", nixl_b_params_t{}, posix) != NIXL_SUCCESS) _exit(3);
    nixlDescList<nixlBlobDesc> l(DRAM_SEG, 0);
    blob(l, r.data(), r.size());
    if (f->registerMem(l) != NIXL_SUCCESS) _exit(3);
    if (f->deregisterMem(l) != NIXL_SUCCESS) _exit(3);
    delete f;
    _exit(0);
}

// Waits at most `secs` for `pid`; true when it exited 0.
bool reap(pid_t pid, int secs) {
    auto deadline = Clock::now() + std::chrono::seconds(secs);
    for (;;) {
        int status = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (r < 0) return false;
        if (Clock::now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

int usage() {
    std::cout << "usage: nixl_stress SECONDS [--cross-poll] [--no-nixl-child] [--child-dir DIR]"
              << std::endl;
    return 2;
}

} // namespace

int main(int argc, char **argv) {
    const char *env = std::getenv("STRESS_SECONDS");
    double seconds = env ? std::atof(env) : 10;
    bool cross_poll = false, nixl_fork = true;
    std::string child_dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--cross-poll") cross_poll = true;
        else if (a == "--no-nixl-child") nixl_fork = false;
        else if (a == "--child-dir" && i + 1 < argc) child_dir = argv[++i];
        else if (!a.empty() && a[0] != '-') seconds = std::atof(a.c_str());
        else finish(usage());
    }
    if (seconds <= 0) finish(usage());

    nixlAgent *a = make_agent("A");
    nixlAgent *b = make_agent("B");
    std::vector<std::vector<unsigned char>> src(kThreads + 1), dst(kThreads + 1);
    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0), lb(DRAM_SEG, 0);
    for (int t = 0; t <= kThreads; t++) {
        src[t].assign(region_len(t), 0);
        dst[t].assign(region_len(t), 0);
        blob(la, src[t].data(), src[t].size());
        blob(lb, dst[t].data(), dst[t].size());
    }
    reg(a, la, "registerMem A");
    reg(b, lb, "registerMem B");
    std::string md_b, remote;
    check(b->getLocalMD(md_b), "getLocalMD B");
    check(a->loadRemoteMD(md_b, remote), "loadRemoteMD");

    pausable = kThreads + 2 + (cross_poll ? 1 : 0);
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back(transfer_thread, a, t, src[t].data(), dst[t].data());
    threads.emplace_back(churn_thread, a);
    threads.emplace_back(notif_thread, b);
    if (cross_poll) {
        threads.emplace_back(cross_poster, a, src[kThreads].data(), dst[kThreads].data(),
                             region_len(kThreads));
        threads.emplace_back(cross_poller, a);
    }

    auto at = [&](double f) { return start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(seconds * f)); };
    uint64_t forks = 0, children_ok = 0, nixl_children = 0, nixl_children_ok = 0;
    bool nixl_forked = !nixl_fork;
    std::this_thread::sleep_until(at(0.25));
    for (auto next = Clock::now(); Clock::now() < at(0.75); next += std::chrono::seconds(2)) {
        std::this_thread::sleep_until(next);
        if (!nixl_forked && Clock::now() >= at(0.5)) {
            nixl_forked = true;
            {
                std::unique_lock<std::mutex> l(pause_mu);
                pause_wanted = true;
                pause_cv.wait(l, [] { return paused == pausable; });
            }
            std::cout.flush();
            pid_t pid = fork();
            if (pid == 0) nixl_child();
            {
                std::lock_guard<std::mutex> l(pause_mu);
                pause_wanted = false;
            }
            pause_cv.notify_all();
            forks++;
            nixl_children++;
            nixl_children_ok += pid > 0 && reap(pid, 60);
            continue;
        }
        std::string path = child_dir + "/nixl_stress-child-" + std::to_string(getpid()) + "-" +
                           std::to_string(forks);
        std::cout.flush();
        pid_t pid = fork();
        if (pid == 0) plain_child(path, static_cast<int>(forks));
        forks++;
        if (pid > 0 && reap(pid, 30)) {
            std::FILE *f = std::fopen(path.c_str(), "r");
            char buf[64] = {0};
            if (f) {
                size_t n = std::fread(buf, 1, sizeof buf - 1, f);
                std::fclose(f);
                children_ok += n > 0 && std::string(buf, n) == "child " + std::to_string(forks - 1) + "\n";
            }
        }
        std::remove(path.c_str());
    }
    std::this_thread::sleep_until(at(1.0));
    stop = true;
    for (auto &th : threads) th.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();

    check(a->invalidateRemoteMD("B"), "invalidateRemoteMD");
    dereg(a, la, "deregisterMem A");
    dereg(b, lb, "deregisterMem B");
    destroy_agent(a);
    destroy_agent(b);

    std::printf(
        "{\"seconds\":%.3f,\"threads\":%d,\"posted\":%lu,\"completed\":%lu,\"bytes\":%lu,"
        "\"status_polls\":%lu,\"registrations\":%lu,\"deregistrations\":%lu,"
        "\"agents_created\":%lu,\"agents_destroyed\":%lu,\"notif_polls\":%lu,\"forks\":%lu,"
        "\"children_ok\":%lu,\"nixl_children\":%lu,\"nixl_children_ok\":%lu,"
        "\"cross_poll\":%s,\"cross_posted\":%lu,\"cross_completed\":%lu,\"cross_bytes\":%lu}\n",
        elapsed, kThreads, counts.posted.load(), counts.completed.load(), counts.bytes.load(),
        counts.polls.load(), counts.registrations.load(), counts.deregistrations.load(),
        counts.agents_created.load(), counts.agents_destroyed.load(), counts.notif_polls.load(),
        forks, children_ok, nixl_children, nixl_children_ok, cross_poll ? "true" : "false",
        counts.cross_posted.load(), counts.cross_completed.load(), counts.cross_bytes.load());
    std::fflush(stdout);
    finish(children_ok + nixl_children_ok == forks ? 0 : 6);
}
