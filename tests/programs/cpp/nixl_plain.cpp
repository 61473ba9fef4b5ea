// nixl_plain: a plain NIXL 1.5.1 user, with no nixl-agent code in it. Tests
// run it bare and under an interposer and compare what it prints.
//
// Build (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
//   g++ -std=c++20 -O1 nixl_plain.cpp -I. -L$NIXL_LIB_DIR -lnixl -lnixl_build \
//       -Wl,-rpath,$NIXL_LIB_DIR -o nixl_plain
// Run:
//   NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins ./nixl_plain ok|seed|stall
//
// Scenarios (argv[1]):
//   ok     agents "A" and "B" in this process, UCX each; 4 x 64 KiB DRAM
//          regions registered on each; A writes its regions into B's with
//          notification "done"; B receives it; everything released. Exit 0.
//   seed   agent "A" registers "kv" (2 x 64 KiB DRAM), then "aux", one DRAM
//          region at address 0: the registration fails, the failure is
//          printed, and the program exits 1 as a serving process dies.
//   stall  A (this process) and B (a forked child) exchange metadata
//          through a pipe; B is then stopped with SIGSTOP and A posts a
//          WRITE to B and polls it for STALL_SECONDS (default 20); then B is
//          killed. Exit 0 if the transfer never completed while B was stopped.
// Exit codes: 0 ok, 1 seed failure, 2 usage, 3 a NIXL call failed
// unexpectedly, 4 the notification did not arrive within 10 s.
//
// With HOLD_BEFORE_EXIT=1 the program reads one line from stdin just before
// it exits (after everything else), so a test can look at it alive.
#include "nixl_decls.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <signal.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

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

} // namespace

int main(int argc, char **argv) {
    std::string scenario = argc > 1 ? argv[1] : "";
    int code;
    if (scenario == "ok") code = run_ok();
    else if (scenario == "seed") code = run_seed();
    else {
        std::cout << "usage: nixl_plain ok|seed|stall" << std::endl;
        code = 2;
    }
    finish(code);
}
