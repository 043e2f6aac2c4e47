//! What the prebuilt MSVC sysroot (core, alloc, compiler_builtins) and `-C control-flow-guard`
//! expect from the C runtime, for the image linked without the WDK (`tools/build-sys.sh`).
//! With `--features wdk` the WDK's kernel libraries and wdk-sys define all of these, so this
//! file is compiled out of that build (two definitions would not link).
//!
//! docs/reference/windows-link.md §1 lists each symbol and why it is needed. `global_asm!`
//! rather than `#[no_mangle]` items: a `#[no_mangle]` static would become a second export of
//! the cdylib, and the image must export only `DriverEntry`.

core::arch::global_asm!(
    // The MSVC linker's marker that floating point is used; any value, never read.
    ".section .rdata,\"dr\"",
    ".globl _fltused",
    ".p2align 2",
    "_fltused:",
    ".long 0x9875",
    // Named by the unwind tables of the prebuilt core and alloc. With panic=abort nothing
    // throws, so the kernel's dispatcher could only reach it for a foreign exception; answer
    // ExceptionContinueSearch (1) so that it keeps looking instead of running anything here.
    ".text",
    ".globl __CxxFrameHandler3",
    ".p2align 4",
    "__CxxFrameHandler3:",
    "mov eax, 1",
    "ret",
    // CFG in checks mode: every indirect call goes through `__guard_dispatch_icall_fptr`
    // (target in rax). The kernel loader replaces both pointers with its own checking
    // routines when kernel CFG is on; until then (or with CFG off) the call goes straight
    // to the target, as the MSVC CRT's defaults do.
    ".globl pvrdma_guard_dispatch_nop",
    ".p2align 4",
    "pvrdma_guard_dispatch_nop:",
    "jmp rax",
    ".globl pvrdma_guard_check_nop",
    ".p2align 4",
    "pvrdma_guard_check_nop:",
    "ret",
    // The pointers live in `.00cfg`, read-only, as MSVC places them: only the loader writes
    // them, before any code of the image runs.
    ".section .00cfg,\"dr\"",
    ".globl __guard_check_icall_fptr",
    ".globl __guard_dispatch_icall_fptr",
    ".p2align 3",
    "__guard_check_icall_fptr:",
    ".quad pvrdma_guard_check_nop",
    "__guard_dispatch_icall_fptr:",
    ".quad pvrdma_guard_dispatch_nop",
    // IMAGE_LOAD_CONFIG_DIRECTORY64 through GuardEHContinuationCount (0x118 bytes), laid out
    // as winnt.h declares it. lld-link points the load-config data directory at
    // `_load_config_used` and defines the `__guard_*` table symbols under /guard:cf.
    // Without this table the GUARD_CF bit would claim a protection the image does not have.
    ".section .rdata,\"dr\"",
    ".globl _load_config_used",
    ".p2align 3",
    "_load_config_used:",
    ".long 0x118",                       // 0x00 Size
    ".long 0",                           // 0x04 TimeDateStamp
    ".short 0, 0",                       // 0x08 MajorVersion, MinorVersion
    ".long 0, 0, 0", // 0x0C GlobalFlagsClear, GlobalFlagsSet, CriticalSectionDefaultTimeout
    ".quad 0, 0, 0, 0, 0, 0", // 0x18 DeCommit*, LockPrefixTable, MaximumAllocationSize, VirtualMemoryThreshold, ProcessAffinityMask
    ".long 0",                // 0x48 ProcessHeapFlags
    ".short 0, 0",            // 0x4C CSDVersion, DependentLoadFlags
    ".quad 0",                // 0x50 EditList
    ".quad 0",                // 0x58 SecurityCookie (no /GS code in a Rust image)
    ".quad 0, 0",             // 0x60 SEHandlerTable, SEHandlerCount (x86 only)
    ".quad __guard_check_icall_fptr", // 0x70 GuardCFCheckFunctionPointer
    ".quad __guard_dispatch_icall_fptr", // 0x78 GuardCFDispatchFunctionPointer
    ".quad __guard_fids_table", // 0x80 GuardCFFunctionTable
    ".quad __guard_fids_count", // 0x88 GuardCFFunctionCount
    ".long __guard_flags",    // 0x90 GuardFlags
    ".short 0, 0",            // 0x94 CodeIntegrity.Flags, .Catalog
    ".long 0, 0",             // 0x98 CodeIntegrity.CatalogOffset, .Reserved
    ".quad __guard_iat_table", // 0xA0 GuardAddressTakenIatEntryTable
    ".quad __guard_iat_count", // 0xA8 GuardAddressTakenIatEntryCount
    ".quad __guard_longjmp_table", // 0xB0 GuardLongJumpTargetTable
    ".quad __guard_longjmp_count", // 0xB8 GuardLongJumpTargetCount
    ".quad 0, 0, 0, 0", // 0xC0 DynamicValueRelocTable, CHPEMetadataPointer, GuardRFFailureRoutine, GuardRFFailureRoutineFunctionPointer
    ".long 0",          // 0xE0 DynamicValueRelocTableOffset
    ".short 0, 0",      // 0xE4 DynamicValueRelocTableSection, Reserved2
    ".quad 0",          // 0xE8 GuardRFVerifyStackPointerFunctionPointer
    ".long 0, 0",       // 0xF0 HotPatchTableOffset, Reserved3
    ".quad 0, 0",       // 0xF8 EnclaveConfigurationPointer, VolatileMetadataPointer
    ".quad __guard_eh_cont_table", // 0x108 GuardEHContinuationTable
    ".quad __guard_eh_cont_count", // 0x110 GuardEHContinuationCount
);
