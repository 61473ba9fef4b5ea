// interpose_bench: a plain NIXL 1.5.1 user that times its own NIXL calls, so
// nixl-bench's `interposer` section can run it bare and under
// `nixl-agent instrument --` and compare. No nixl-agent code is in it; the
// declarations are the test programs' own (tests/programs/cpp/nixl_decls.h).
//
// Build (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs), as nixl-bench does:
//   g++ -std=c++20 -O2 interpose_bench.cpp -I../../tests/programs/cpp
//   (same line) -L$NIXL_LIB_DIR -lnixl -lnixl_build -Wl,-rpath,$NIXL_LIB_DIR -o interpose_bench
// Run:
//   NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins ./interpose_bench reg N REPS
//   NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins ./interpose_bench xfer REPS
//
// Modes (one JSON line on stdout, nanoseconds):
//   reg N REPS  agent "A" (UCX); N regions of 4 KiB in one registerMem list.
//               cold_ns: the first registerMem of the process; then REPS
//               warm deregisterMem + registerMem pairs (the first
//               deregisterMem undoes the cold one): reg_ns[] and dereg_ns[].
//   xfer REPS   agents "A" and "B" (UCX each) in this process; one WRITE of
//               one 64 B descriptor from A to B, prepared once.
//               post_ns[]: each postXferReq of that request, reposted after
//               it completed (only the post is timed; the poll to DONE is
//               not), 2,000 of them.
//               status_done_ns: getXferStatus on the completed request, REPS
//               calls in one timed loop, divided by REPS (NIXL returns the
//               stored NIXL_SUCCESS of a done request without asking the
//               backend again: checked, every call must return it).
//               status_inflight_ns: the mean getXferStatus call while the
//               reposts above were in flight (calls that ask UCX).
// Exit codes: 0 ok, 2 usage, 3 a NIXL call failed.
#include "nixl_decls.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

void check(nixl_status_t st, const char *what) {
    if (st != NIXL_SUCCESS) {
        std::printf("{\"error\":\"%s: %s\"}\n", what, nixlEnumStrings::statusStr(st).c_str());
        std::exit(3);
    }
}

nixlAgent *make_agent(const std::string &name) {
    nixlAgentConfig cfg;
    auto *agent = new nixlAgent(name, cfg);
    nixlBackendH *ucx = nullptr;
    check(agent->createBackend("UCX", nixl_b_params_t{}, ucx), "createBackend");
    return agent;
}

void print_list(const char *key, const std::vector<int64_t> &v) {
    std::printf("\"%s\":[", key);
    for (size_t i = 0; i < v.size(); i++) std::printf(i ? ",%lld" : "%lld", static_cast<long long>(v[i]));
    std::printf("]");
}

int run_reg(size_t n, size_t reps) {
    constexpr size_t kRegion = 4096;
    nixlAgent *a = make_agent("A");
    // One allocation, touched, cut into n regions: the pages exist before
    // the clock starts, bare or instrumented alike.
    std::vector<unsigned char> buf(n * kRegion, 1);
    nixlDescList<nixlBlobDesc> list(DRAM_SEG, 0);
    for (size_t i = 0; i < n; i++) {
        nixlBlobDesc d;
        d.addr = reinterpret_cast<uintptr_t>(buf.data() + i * kRegion);
        d.len = kRegion;
        d.devId = 0;
        list.addDesc(d);
    }
    auto t0 = Clock::now();
    nixl_status_t st = a->registerMem(list);
    int64_t cold = ns_since(t0);
    check(st, "registerMem (cold)");
    std::vector<int64_t> reg, dereg;
    for (size_t r = 0; r < reps; r++) {
        t0 = Clock::now();
        st = a->deregisterMem(list);
        dereg.push_back(ns_since(t0));
        check(st, "deregisterMem");
        t0 = Clock::now();
        st = a->registerMem(list);
        reg.push_back(ns_since(t0));
        check(st, "registerMem (warm)");
    }
    check(a->deregisterMem(list), "deregisterMem (last)");
    std::printf("{\"mode\":\"reg\",\"n\":%zu,\"cold_ns\":%lld,", n, static_cast<long long>(cold));
    print_list("reg_ns", reg);
    std::printf(",");
    print_list("dereg_ns", dereg);
    std::printf("}\n");
    delete a;
    return 0;
}

int run_xfer(size_t reps) {
    constexpr size_t kLen = 64;
    constexpr size_t kPosts = 2000;
    nixlAgent *a = make_agent("A");
    nixlAgent *b = make_agent("B");
    std::vector<unsigned char> src(4096, 7), dst(4096, 0);
    nixlDescList<nixlBlobDesc> la(DRAM_SEG, 0), lb(DRAM_SEG, 0);
    la.addDesc(nixlBlobDesc{{reinterpret_cast<uintptr_t>(src.data()), src.size(), 0}, {}});
    lb.addDesc(nixlBlobDesc{{reinterpret_cast<uintptr_t>(dst.data()), dst.size(), 0}, {}});
    check(a->registerMem(la), "registerMem A");
    check(b->registerMem(lb), "registerMem B");
    std::string md_b, remote;
    check(b->getLocalMD(md_b), "getLocalMD B");
    check(a->loadRemoteMD(md_b, remote), "loadRemoteMD");

    nixlDescList<nixlBasicDesc> xa(DRAM_SEG, 0), xb(DRAM_SEG, 0);
    xa.addDesc(nixlBasicDesc{reinterpret_cast<uintptr_t>(src.data()), kLen, 0});
    xb.addDesc(nixlBasicDesc{reinterpret_cast<uintptr_t>(dst.data()), kLen, 0});
    nixlXferReqH *req = nullptr;
    check(a->createXferReq(NIXL_WRITE, xa, xb, "B", req), "createXferReq");

    nixl_notifs_t notifs;
    auto to_done = [&](nixl_status_t st, uint64_t &polls, int64_t &poll_ns) {
        if (st != NIXL_SUCCESS && st != NIXL_IN_PROG) check(st, "postXferReq");
        while (st == NIXL_IN_PROG) {
            auto p0 = Clock::now();
            st = a->getXferStatus(req);
            poll_ns += ns_since(p0);
            polls++;
            if (st == NIXL_IN_PROG) check(b->getNotifs(notifs), "getNotifs");
        }
        check(st, "getXferStatus");
    };

    // Warm-up: the connection is made by the first post.
    uint64_t polls = 0;
    int64_t poll_ns = 0;
    for (int i = 0; i < 50; i++) to_done(a->postXferReq(req), polls, poll_ns);
    polls = 0;
    poll_ns = 0;

    std::vector<int64_t> post;
    post.reserve(kPosts);
    for (size_t i = 0; i < kPosts; i++) {
        auto t0 = Clock::now();
        nixl_status_t st = a->postXferReq(req);
        post.push_back(ns_since(t0));
        to_done(st, polls, poll_ns);
    }

    // The request is done: every further getXferStatus returns its stored
    // status.
    size_t bad = 0;
    auto t0 = Clock::now();
    for (size_t i = 0; i < reps; i++) bad += a->getXferStatus(req) != NIXL_SUCCESS;
    int64_t loop = ns_since(t0);
    if (bad) {
        std::printf("{\"error\":\"%zu of %zu polls of a done request were not NIXL_SUCCESS\"}\n", bad, reps);
        return 3;
    }

    check(a->releaseXferReq(req), "releaseXferReq");
    check(a->invalidateRemoteMD("B"), "invalidateRemoteMD");
    check(a->deregisterMem(la), "deregisterMem A");
    check(b->deregisterMem(lb), "deregisterMem B");
    std::vector<int64_t> sorted = post;
    std::sort(sorted.begin(), sorted.end());
    std::printf("{\"mode\":\"xfer\",\"reps\":%zu,\"post_median_ns\":%lld,\"status_done_ns\":%.2f,"
                "\"status_inflight_ns\":%.2f,\"inflight_polls\":%llu,",
                reps, static_cast<long long>(sorted[sorted.size() / 2]),
                static_cast<double>(loop) / static_cast<double>(reps),
                polls ? static_cast<double>(poll_ns) / static_cast<double>(polls) : 0.0,
                static_cast<unsigned long long>(polls));
    print_list("post_ns", post);
    std::printf("}\n");
    delete a;
    delete b;
    return 0;
}

[[noreturn]] void usage() {
    std::fprintf(stderr, "usage: interpose_bench reg N REPS | xfer REPS\n");
    std::exit(2);
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2) usage();
    std::string mode = argv[1];
    if (mode == "reg" && argc == 4) return run_reg(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
    if (mode == "xfer" && argc == 3) return run_xfer(std::strtoull(argv[2], nullptr, 10));
    usage();
}
