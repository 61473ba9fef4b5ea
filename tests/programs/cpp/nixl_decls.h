// Minimal declarations of the NIXL 1.5.1 C++ API this test program calls.
//
// The NIXL wheel ships no headers, and this program must contain nothing of
// NIXL's own: these declarations are written from the symbols the 1.5.1
// libraries export (`nm -D --defined-only libnixl.so libnixl_build.so |
// c++filt`) and from the layouts of the public 1.4.1 headers, checked against
// 1.5.1 by disassembly (nixl_capi_create_opt_args allocates and lays out a
// 208-byte nixlAgentOptionalArgs exactly as below).
//
// Only layouts the program touches are spelled out; NIXL-owned objects
// (nixlAgent, nixlDescList) are opaque, over-sized storage that the
// library's own constructors fill and its destructors empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

class nixlBackendH;
class nixlXferReqH;
class nixlDlistH;

enum nixl_mem_t { DRAM_SEG, VRAM_SEG, BLK_SEG, OBJ_SEG, FILE_SEG };
enum nixl_xfer_op_t { NIXL_READ, NIXL_WRITE };
enum nixl_status_t {
    NIXL_IN_PROG = 1,
    NIXL_SUCCESS = 0,
    NIXL_ERR_NOT_POSTED = -1,
    NIXL_ERR_INVALID_PARAM = -2,
    NIXL_ERR_BACKEND = -3,
    NIXL_ERR_NOT_FOUND = -4,
    NIXL_ERR_MISMATCH = -5,
    NIXL_ERR_NOT_ALLOWED = -6,
    NIXL_ERR_REPOST_ACTIVE = -7,
    NIXL_ERR_UNKNOWN = -8,
    NIXL_ERR_NOT_SUPPORTED = -9,
    NIXL_ERR_REMOTE_DISCONNECT = -10,
    NIXL_ERR_CANCELED = -11,
    NIXL_ERR_NO_TELEMETRY = -12,
};
enum class nixl_thread_sync_t { NONE, STRICT, RW };

using nixl_b_params_t = std::unordered_map<std::string, std::string>;
using nixl_notifs_t = std::unordered_map<std::string, std::vector<std::string>>;
// What a backend knows of one descriptor (queryMem): nothing, or its facts.
using nixl_query_resp_t = std::optional<nixl_b_params_t>;

namespace nixlEnumStrings {
// Exported by libnixl.so: "NIXL_SUCCESS", "NIXL_ERR_BACKEND", ...
std::string statusStr(const nixl_status_t &status);
} // namespace nixlEnumStrings

// 40 bytes: the agent's construction options (all defaults: no progress or
// listener thread, port 8888, no telemetry). The padding after
// captureTelemetry is spelled out and zero: releases before 1.5 (1.0.1's
// `int listenPort`) read syncMode and captureTelemetry 4 bytes later, where
// it lies, and must find NONE and false there, not what the stack held.
struct nixlAgentConfig {
    bool useProgThread = false;
    bool useListenThread = false;
    uint16_t listenPort = 8888;
    nixl_thread_sync_t syncMode = nixl_thread_sync_t::NONE;
    bool captureTelemetry = false;
    unsigned char zero_[7] = {};
    uint64_t pthrDelay = 0;
    uint64_t lthrDelay = 100000;
    int64_t etcdWatchTimeoutUs = 5000000;
};
static_assert(sizeof(nixlAgentConfig) == 40);
static_assert(offsetof(nixlAgentConfig, pthrDelay) == 16);

// 208 bytes (operator new(0xd0) in nixl_capi_create_opt_args).
struct nixlAgentOptionalArgs {
    std::vector<nixlBackendH *> backends;   // 0x00
    std::optional<std::string> notif;       // 0x18, engaged flag at 0x38
    std::string notifMsg;                   // 0x40
    bool hasNotif = false;                  // 0x60
    bool skipDescMerge = false;             // 0x61
    bool includeConnInfo = false;           // 0x62
    std::string ipAddr;                     // 0x68
    int port = 8888;                        // 0x88
    std::string metadataLabel;              // 0x90
    std::string customParam;                // 0xb0
};
static_assert(sizeof(nixlAgentOptionalArgs) == 0xd0);
static_assert(offsetof(nixlAgentOptionalArgs, hasNotif) == 0x60);
static_assert(offsetof(nixlAgentOptionalArgs, port) == 0x88);

// 24 bytes: one contiguous region.
struct nixlBasicDesc {
    uintptr_t addr;
    size_t len;
    uint64_t devId;
};
static_assert(sizeof(nixlBasicDesc) == 24);

// 56 bytes: a region and its backend blob.
struct nixlBlobDesc : nixlBasicDesc {
    std::string metaInfo;
};
static_assert(sizeof(nixlBlobDesc) == 56);

// NIXL's polymorphic list (vptr, type, std::vector<T>: 40 bytes). Every
// member used here is a weak symbol exported by libnixl_build.so, so the
// object is opaque storage that only NIXL's code touches.
template <class T> class nixlDescList {
    alignas(8) unsigned char storage_[128];

public:
    nixlDescList(const nixl_mem_t &type, const int &init_size);
    ~nixlDescList();
    nixlDescList(const nixlDescList &) = delete;
    nixlDescList &operator=(const nixlDescList &) = delete;
    void addDesc(const T &desc);
};

// The agent: in NIXL one std::unique_ptr<nixlAgentData> (8 bytes). Allocate
// it with `new`; the storage here is generously over-sized.
class nixlAgent {
    alignas(16) unsigned char storage_[256];

public:
    nixlAgent(const std::string &name, const nixlAgentConfig &cfg);
    ~nixlAgent();
    nixlAgent(const nixlAgent &) = delete;
    nixlAgent &operator=(const nixlAgent &) = delete;

    nixl_status_t createBackend(const std::string &type, const nixl_b_params_t &params,
                                nixlBackendH *&backend);
    nixl_status_t registerMem(const nixlDescList<nixlBlobDesc> &descs,
                              const nixlAgentOptionalArgs *extra = nullptr);
    nixl_status_t deregisterMem(const nixlDescList<nixlBlobDesc> &descs,
                                const nixlAgentOptionalArgs *extra = nullptr);
    // Exactly one backend in `extra`; NIXL_ERR_INVALID_PARAM without.
    nixl_status_t queryMem(const nixlDescList<nixlBlobDesc> &descs, std::vector<nixl_query_resp_t> &resp,
                           const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t makeConnection(const std::string &remote,
                                 const nixlAgentOptionalArgs *extra = nullptr);
    nixl_status_t createXferReq(const nixl_xfer_op_t &op,
                                const nixlDescList<nixlBasicDesc> &local,
                                const nixlDescList<nixlBasicDesc> &remote,
                                const std::string &remote_agent, nixlXferReqH *&req,
                                const nixlAgentOptionalArgs *extra = nullptr) const;
    // The local side's list (NIXL calls the named one for this agent).
    nixl_status_t prepXferDlist(const nixlDescList<nixlBasicDesc> &descs, nixlDlistH *&dlist,
                                const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t prepXferDlist(const std::string &agent_name,
                                const nixlDescList<nixlBasicDesc> &descs, nixlDlistH *&dlist,
                                const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t makeXferReq(const nixl_xfer_op_t &op, const nixlDlistH *local,
                              const std::vector<int> &local_indices, const nixlDlistH *remote,
                              const std::vector<int> &remote_indices, nixlXferReqH *&req,
                              const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t releasedDlistH(nixlDlistH *dlist) const;
    nixl_status_t postXferReq(nixlXferReqH *req,
                              const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t getXferStatus(nixlXferReqH *req) const;
    nixl_status_t releaseXferReq(nixlXferReqH *req) const;
    nixl_status_t getNotifs(nixl_notifs_t &notifs, const nixlAgentOptionalArgs *extra = nullptr);
    nixl_status_t genNotif(const std::string &remote, const std::string &msg,
                           const nixlAgentOptionalArgs *extra = nullptr) const;
    nixl_status_t getLocalMD(std::string &md) const;
    nixl_status_t loadRemoteMD(const std::string &md, std::string &agent_name);
    nixl_status_t invalidateRemoteMD(const std::string &remote);
};
