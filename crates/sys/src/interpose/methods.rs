//! The one table of NIXL's `nixlAgent` methods the interposer hooks: per
//! method its [`Sym`], its short NIXL name, its mangled name in NIXL 1.5.1
//! (the Itanium ABI, libstdc++'s C++11 strings), the signature of the
//! function the interposer exports under that name (`this` first,
//! references as pointers, a `std::string` taken by value as a pointer to
//! the caller's temporary, `std::span` as its two words), the hook it calls
//! with the arguments that hook reads, and where releases differ (`instead`,
//! `optional`).
//!
//! The table is a macro that hands its rows to another: here
//! `define_sym!` makes [`Sym`] and its columns; the interposer library's
//! `exports.rs` expands it with [`export_nixl_agent_methods!`], which
//! defines each exported function (so a mangled name is written here and
//! nowhere else, and a method's signature is the function type its hook
//! forwards to). Adding a method is a row; one with no meaning of its own
//! to the recording takes `hooks::plain` (its calls counted by method and
//! status).
//!
//! Of NIXL's own calls between these, one is left out: the local
//! `prepXferDlist` calls the one with an agent name. Both `makeXferReq`
//! forms are hooked (releases before 1.5.0 have only the vector one); in
//! 1.5 the vector one calls the span one, which passes through, re-entered
//! on a thread already inside a hook: each call is counted once.

/// The table of hooked `nixlAgent` methods, handed to `$then!` (a macro
/// path) as rows, after `[...]` (what follows `$then`, for it).
#[doc(hidden)]
#[macro_export]
macro_rules! nixl_agent_methods {
    ($then:path $(, $($with:tt)*)?) => {
        $then! {
            [$($($with)*)?]
            /// `nixlAgent(const std::string& name, const nixlAgentConfig&)`.
            AgentNew {
                name: "nixlAgent",
                mangled: "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig",
                export: fn agent_new(this: Ptr, name: CPtr, cfg: CPtr),
                hook: agent_new(name),
                instead: None,
                optional: false,
            }
            /// `~nixlAgent()`.
            AgentDrop {
                name: "~nixlAgent",
                mangled: "_ZN9nixlAgentD1Ev",
                export: fn agent_drop(this: Ptr),
                hook: agent_drop(),
                instead: None,
                optional: false,
            }
            /// `createBackend(const std::string& type, const nixl_b_params_t&, nixlBackendH*&)`.
            CreateBackend {
                name: "createBackend",
                mangled: "_ZN9nixlAgent13createBackendERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt13unordered_mapIS5_S5_St4hashIS5_ESt8equal_toIS5_ESaISt4pairIS6_S5_EEERP12nixlBackendH",
                export: fn create_backend(this: Ptr, plugin: CPtr, params: CPtr, out: *mut Ptr) -> c_int,
                hook: create_backend(plugin, out),
                instead: None,
                optional: false,
            }
            /// `registerMem(const nixl_reg_dlist_t&, const nixl_opt_args_t*)`.
            RegisterMem {
                name: "registerMem",
                mangled: "_ZN9nixlAgent11registerMemERK12nixlDescListI12nixlBlobDescEPK21nixlAgentOptionalArgs",
                export: fn register_mem(this: Ptr, descs: CPtr, opt: CPtr) -> c_int,
                hook: registration(descs),
                instead: None,
                optional: false,
            }
            /// `deregisterMem(const nixl_reg_dlist_t&, const nixl_opt_args_t*)`.
            DeregisterMem {
                name: "deregisterMem",
                mangled: "_ZN9nixlAgent13deregisterMemERK12nixlDescListI12nixlBlobDescEPK21nixlAgentOptionalArgs",
                export: fn deregister_mem(this: Ptr, descs: CPtr, opt: CPtr) -> c_int,
                hook: registration(descs),
                instead: None,
                optional: false,
            }
            /// `createXferReq(const nixl_xfer_op_t&, const nixl_xfer_dlist_t& local,
            /// remote, const std::string& remote_agent, nixlXferReqH*&, const
            /// nixl_opt_args_t*) const`.
            CreateXferReq {
                name: "createXferReq",
                mangled: "_ZNK9nixlAgent13createXferReqERK14nixl_xfer_op_tRK12nixlDescListI13nixlBasicDescES7_RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERP12nixlXferReqHPK21nixlAgentOptionalArgs",
                export: fn create_xfer(
                    this: Ptr,
                    op: *const c_int,
                    local: CPtr,
                    remote: CPtr,
                    peer: CPtr,
                    req: *mut Ptr,
                    opt: CPtr,
                ) -> c_int,
                hook: create_xfer(op, local, remote, peer, req),
                instead: None,
                optional: false,
            }
            /// `prepXferDlist(const std::string& agent, const nixl_xfer_dlist_t&,
            /// nixlDlistH*&, const nixl_opt_args_t*) const`.
            PrepXferDlist {
                name: "prepXferDlist",
                mangled: "_ZNK9nixlAgent13prepXferDlistERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI13nixlBasicDescERP10nixlDlistHPK21nixlAgentOptionalArgs",
                export: fn prep_dlist(this: Ptr, peer: CPtr, descs: CPtr, out: *mut Ptr, opt: CPtr) -> c_int,
                hook: prep_dlist(peer, descs, out),
                instead: None,
                optional: false,
            }
            /// `prepXferDlist(const std::string& agent, const nixl_stride_dlist_t&,
            /// nixlDlistH*&, const nixl_opt_args_t*) const`: the strided form
            /// (`nixlDescList<nixlStrideDesc>`, what NIXL 1.5's Python API
            /// prepares Nx5 arrays with), which only some releases have.
            PrepXferDlistStrided {
                name: "prepXferDlist",
                mangled: "_ZNK9nixlAgent13prepXferDlistERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI14nixlStrideDescERP10nixlDlistHPK21nixlAgentOptionalArgs",
                export: fn prep_dlist_strided(this: Ptr, peer: CPtr, descs: CPtr, out: *mut Ptr, opt: CPtr) -> c_int,
                hook: prep_dlist_strided(peer, descs, out),
                instead: None,
                optional: true,
            }
            /// `releasedDlistH(nixlDlistH*) const`.
            ReleasedDlistH {
                name: "releasedDlistH",
                mangled: "_ZNK9nixlAgent14releasedDlistHEP10nixlDlistH",
                export: fn released_dlist(this: Ptr, dlist: Ptr) -> c_int,
                hook: on_handle(dlist),
                instead: None,
                optional: false,
            }
            /// `makeXferReq(nixl_xfer_op_t, const nixlDlistH& local, std::span<const
            /// int>, const nixlDlistH& remote, std::span<const int>,
            /// nixlXferReqH*&, const nixl_opt_args_t*) const`: new in 1.5.0;
            /// before it the vector form is the one programs call (and from
            /// 1.5.0 it calls this one, which then passes through: one call,
            /// counted once).
            MakeXferReq {
                name: "makeXferReq",
                mangled: "_ZNK9nixlAgent11makeXferReqE14nixl_xfer_op_tRK10nixlDlistHSt4spanIKiLm18446744073709551615EES3_S6_RP12nixlXferReqHPK21nixlAgentOptionalArgs",
                export: fn make_xfer(
                    this: Ptr,
                    op: c_int,
                    local: CPtr,
                    local_idx: Span,
                    remote: CPtr,
                    remote_idx: Span,
                    req: *mut Ptr,
                    opt: CPtr,
                ) -> c_int,
                hook: make_xfer(op, local, local_idx, remote, remote_idx, req),
                instead: Some(MakeXferReqVec),
                optional: false,
            }
            /// `makeXferReq(const nixl_xfer_op_t&, const nixlDlistH* local, const
            /// std::vector<int>&, const nixlDlistH* remote, const
            /// std::vector<int>&, nixlXferReqH*&, const nixl_opt_args_t*)
            /// const`: the form releases before 1.5.0 have only.
            MakeXferReqVec {
                name: "makeXferReq",
                mangled: "_ZNK9nixlAgent11makeXferReqERK14nixl_xfer_op_tPK10nixlDlistHRKSt6vectorIiSaIiEES5_SA_RP12nixlXferReqHPK21nixlAgentOptionalArgs",
                export: fn make_xfer_vec(
                    this: Ptr,
                    op: *const c_int,
                    local: CPtr,
                    local_idx: CPtr,
                    remote: CPtr,
                    remote_idx: CPtr,
                    req: *mut Ptr,
                    opt: CPtr,
                ) -> c_int,
                hook: make_xfer_vec(op, local, local_idx, remote, remote_idx, req),
                instead: Some(MakeXferReq),
                optional: false,
            }
            /// `postXferReq(nixlXferReqH*, const nixl_opt_args_t*) const`: the
            /// data path's per-transfer call, on the sink's narrow pair.
            PostXferReq {
                name: "postXferReq",
                mangled: "_ZNK9nixlAgent11postXferReqEP12nixlXferReqHPK21nixlAgentOptionalArgs",
                export: fn post_xfer(this: Ptr, req: Ptr, opt: CPtr) -> c_int,
                hook: post(req),
                instead: None,
                optional: false,
            }
            /// `getXferStatus(nixlXferReqH*) const`: the poll loop's call.
            GetXferStatus {
                name: "getXferStatus",
                mangled: "_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH",
                export: fn xfer_status(this: Ptr, req: Ptr) -> c_int,
                hook: poll(req),
                instead: None,
                optional: false,
            }
            /// `releaseXferReq(nixlXferReqH*) const`.
            ReleaseXferReq {
                name: "releaseXferReq",
                mangled: "_ZNK9nixlAgent14releaseXferReqEP12nixlXferReqH",
                export: fn release_xfer(this: Ptr, req: Ptr) -> c_int,
                hook: on_handle(req),
                instead: None,
                optional: false,
            }
            /// `loadRemoteMD(const std::string& md, std::string& agent_name)`.
            LoadRemoteMd {
                name: "loadRemoteMD",
                mangled: "_ZN9nixlAgent12loadRemoteMDERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERS5_",
                export: fn load_md(this: Ptr, md: CPtr, name: Ptr) -> c_int,
                hook: load_md(name),
                instead: None,
                optional: false,
            }
            /// `invalidateRemoteMD(const std::string& remote)`.
            InvalidateRemoteMd {
                name: "invalidateRemoteMD",
                mangled: "_ZN9nixlAgent18invalidateRemoteMDERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
                export: fn invalidate_md(this: Ptr, peer: CPtr) -> c_int,
                hook: on_peer(peer),
                instead: None,
                optional: false,
            }
            /// `makeConnection(const std::string& remote, const nixl_opt_args_t*)`.
            MakeConnection {
                name: "makeConnection",
                mangled: "_ZN9nixlAgent14makeConnectionERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPK21nixlAgentOptionalArgs",
                export: fn make_connection(this: Ptr, peer: CPtr, opt: CPtr) -> c_int,
                hook: on_peer(peer),
                instead: None,
                optional: false,
            }
            /// `fetchRemoteMD(std::string remote, const nixl_opt_args_t*)`: the
            /// name passed by value is a pointer to the caller's copy.
            FetchRemoteMd {
                name: "fetchRemoteMD",
                mangled: "_ZN9nixlAgent13fetchRemoteMDENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPK21nixlAgentOptionalArgs",
                export: fn fetch_md(this: Ptr, peer: CPtr, opt: CPtr) -> c_int,
                hook: on_peer(peer),
                instead: None,
                optional: false,
            }
            /// `checkRemoteMD(std::string remote, const nixl_xfer_dlist_t&) const`:
            /// the name passed by value is a pointer to the caller's copy.
            CheckRemoteMd {
                name: "checkRemoteMD",
                mangled: "_ZNK9nixlAgent13checkRemoteMDENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK12nixlDescListI13nixlBasicDescE",
                export: fn check_md(this: Ptr, peer: CPtr, descs: CPtr) -> c_int,
                hook: on_peer(peer),
                instead: None,
                optional: false,
            }
            /// `genNotif(const std::string& remote, const nixl_blob_t& msg,
            /// const nixl_opt_args_t*) const`.
            GenNotif {
                name: "genNotif",
                mangled: "_ZNK9nixlAgent8genNotifERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES7_PK21nixlAgentOptionalArgs",
                export: fn gen_notif(this: Ptr, peer: CPtr, msg: CPtr, opt: CPtr) -> c_int,
                hook: gen_notif(peer, msg),
                instead: None,
                optional: false,
            }
            /// `queryMem(const nixl_reg_dlist_t&, std::vector<nixl_query_resp_t>&,
            /// const nixl_opt_args_t*) const`: what a backend knows of each
            /// descriptor (a file's size, an object's presence).
            QueryMem {
                name: "queryMem",
                mangled: "_ZNK9nixlAgent8queryMemERK12nixlDescListI12nixlBlobDescERSt6vectorISt8optionalISt13unordered_mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESD_St4hashISD_ESt8equal_toISD_ESaISt4pairIKSD_SD_EEEESaISN_EEPK21nixlAgentOptionalArgs",
                export: fn query_mem(this: Ptr, descs: CPtr, resp: Ptr, opt: CPtr) -> c_int,
                hook: plain(),
                instead: None,
                optional: false,
            }
            /// `getNotifs(nixl_notifs_t&, const nixl_opt_args_t*)`.
            GetNotifs {
                name: "getNotifs",
                mangled: "_ZN9nixlAgent9getNotifsERSt13unordered_mapINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt6vectorIS6_SaIS6_EESt4hashIS6_ESt8equal_toIS6_ESaISt4pairIKS6_S9_EEEPK21nixlAgentOptionalArgs",
                export: fn get_notifs(this: Ptr, map: Ptr, opt: CPtr) -> c_int,
                hook: get_notifs(map),
                instead: None,
                optional: false,
            }
        }
    };
}

/// Defines, from the table's rows, the exported `nixlAgent` functions of
/// the interposer library: each under its mangled name, `extern
/// "C-unwind"` (NIXL's C++ exceptions pass through), handing the sink
/// (`[$sink]`: an absolute path of a function returning `&'static` a
/// [`CallSink`](super::CallSink)), NIXL's definition applied to the
/// caller's arguments ([`Nixl`](super::hooks::Nixl), its function type the
/// row's signature) and the arguments its hook reads to that hook.
///
/// Expanded only in the interposer library (`nixl_agent_methods!(
/// nixl_agent_sys::export_nixl_agent_methods, crate::translator)`), where
/// naming an exported symbol is allowed to be unsafe.
#[doc(hidden)]
#[macro_export]
macro_rules! export_nixl_agent_methods {
    (
        [$sink:path]
        $(
            $(#[$attr:meta])*
            $sym:ident {
                name: $name:literal,
                mangled: $mangled:literal,
                export: fn $export:ident($this:ident: $this_ty:ty $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?,
                hook: $hook:ident($($read:ident),* $(,)?),
                instead: $instead:ident $(($other:ident))?,
                optional: $optional:literal $(,)?
            }
        )*
    ) => {
        /// NIXL's `nixlAgent` methods, exported (`nixl_agent_sys`'s table).
        mod nixl_agent_methods {
            use $crate::interpose::hooks::{self, CPtr, Nixl, Ptr, Span};
            use $crate::interpose::Sym;
            use ::std::ffi::c_int;

            $(
                $(#[$attr])*
                #[unsafe(export_name = $mangled)]
                #[allow(clippy::too_many_arguments)]
                extern "C-unwind" fn $export($this: $this_ty $(, $arg: $ty)*) $(-> $ret)? {
                    type F = unsafe extern "C-unwind" fn($this_ty $(, $ty)*) $(-> $ret)?;
                    // Safety: NIXL's definition, found by the table's name,
                    // is of the table's type; it is handed the caller's
                    // arguments untouched.
                    let call = move |f: F| unsafe { f($this $(, $arg)*) };
                    // Safety: `F` is this method's signature and `call`
                    // calls it with its caller's arguments.
                    let nixl = unsafe { Nixl::new(Sym::$sym, call) };
                    // Safety: the symbol is NIXL's method of that name, so
                    // its callers pass that method's arguments, which is
                    // what the hook requires.
                    unsafe { hooks::$hook($sink(), nixl, $this $(, $read)*) }
                }
            )*
        }
    };
}

/// `Sym` and its columns, from the table's rows.
macro_rules! define_sym {
    (
        []
        $(
            $(#[$attr:meta])*
            $sym:ident {
                name: $name:literal,
                mangled: $mangled:literal,
                export: fn $export:ident($($sig:tt)*) $(-> $ret:ty)?,
                hook: $hook:ident($($read:ident),* $(,)?),
                instead: $instead:ident $(($other:ident))?,
                optional: $optional:literal $(,)?
            }
        )*
    ) => {
        /// A `nixlAgent` method the interposer exports: a row of the table
        /// ([`crate::nixl_agent_methods!`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Sym {
            $($(#[$attr])* $sym,)*
        }

        impl Sym {
            pub const ALL: [Sym; Sym::COUNT] = [$(Sym::$sym),*];
            pub const COUNT: usize = [$(stringify!($sym)),*].len();

            /// The symbol's name in `libnixl.so` 1.5.1.
            pub const fn mangled(self) -> &'static str {
                match self {
                    $(Sym::$sym => $mangled,)*
                }
            }

            /// The method's name in NIXL's C++ API (`registerMem`): a closed
            /// label value. Two forms of one method share it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Sym::$sym => $name,)*
                }
            }

            /// Whether the method has no record of its own (its hook is
            /// `hooks::plain`): its calls are counted by method and status
            /// only, the neutral call record a Python front-end may also
            /// hand the engine for the same method of NIXL's Python API.
            pub fn plain(self) -> bool {
                match self {
                    $(Sym::$sym => stringify!($hook) == "plain",)*
                }
            }

            /// The method NIXL defines instead of this one in some releases:
            /// a copy must define one of the two.
            pub const fn instead(self) -> Option<Sym> {
                match self {
                    $(Sym::$sym => $instead $((Sym::$other))?,)*
                }
            }

            /// A method only some releases have, which a copy need not
            /// define.
            pub const fn optional(self) -> bool {
                match self {
                    $(Sym::$sym => $optional,)*
                }
            }
        }
    };
}

crate::nixl_agent_methods!(define_sym);

#[cfg(test)]
mod tests {
    use super::Sym;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    #[test]
    fn the_columns_agree() {
        for s in Sym::ALL {
            assert!(
                s.mangled().starts_with("_ZN9nixlAgent") || s.mangled().starts_with("_ZNK9nixlAgent"),
                "{s:?}"
            );
            assert!(s.mangled().contains(s.name().trim_start_matches('~')), "{s:?}");
            if let Some(other) = s.instead() {
                assert_eq!(other.instead(), Some(s), "{s:?}: a pair names each other");
                assert_eq!(other.name(), s.name(), "{s:?}: two forms of one method");
            }
        }
        assert!(Sym::QueryMem.plain() && !Sym::RegisterMem.plain());
        let names: BTreeSet<&str> = Sym::ALL.iter().map(|s| s.mangled()).collect();
        assert_eq!(names.len(), Sym::COUNT, "one row a symbol");
    }

    /// The workspace's product sources: the root crate's `src/`, each
    /// crate's `src/`, the Python extension's.
    fn product_sources() -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.filter_map(Result::ok) {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let mut dirs = vec![root.join("src"), root.join("python/native/src")];
        for c in std::fs::read_dir(root.join("crates")).unwrap().filter_map(Result::ok) {
            dirs.push(c.path().join("src"));
        }
        let mut out = Vec::new();
        for d in &dirs {
            walk(d, &mut out);
        }
        out
    }

    /// Every mangled `nixlAgent` name is written in one product file (this
    /// one): the exported functions, the gate and its messages all take it
    /// from the table.
    #[test]
    fn every_mangled_nixl_agent_name_is_written_in_one_file() {
        let mut found: BTreeMap<String, BTreeSet<PathBuf>> = BTreeMap::new();
        let files = product_sources();
        assert!(files.len() > 50, "{} sources", files.len());
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for prefix in ["_ZN9nixlAgent", "_ZNK9nixlAgent"] {
                for (at, _) in text.match_indices(prefix) {
                    let name: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    found.entry(name).or_default().insert(f.clone());
                }
            }
        }
        let twice: Vec<_> = found.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(twice.is_empty(), "written in more than one file: {twice:#?}");
        for s in Sym::ALL {
            let files = found.get(s.mangled()).unwrap_or_else(|| panic!("{s:?} not found"));
            assert!(
                files.iter().all(|f| f.ends_with("crates/sys/src/interpose/methods.rs")),
                "{s:?}: {files:?}"
            );
        }
    }
}
