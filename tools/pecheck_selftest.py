#!/usr/bin/env python3
"""pecheck must fail images that break its rules: each case damages a copy of a good image
(or the allowlist) and expects exit status 1 with the named check failing.

Usage: pecheck_selftest.py IMAGE.sys MAP [ALLOWLIST]
"""
import os
import subprocess
import sys
import tempfile

import pefile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(image, mapfile, allow, *extra):
    r = subprocess.run([sys.executable, os.path.join(HERE, "pecheck.py"), image, "--map", mapfile,
                        "--allow", allow, *extra], capture_output=True, text=True)
    return r.returncode, r.stdout


def unguard_one_call(pe):
    """Rewrites the first `call [rip+__guard_dispatch_icall_fptr]` (FF 15 disp32) into
    `call rax` plus four NOPs: the target the dispatch would have checked, called directly."""
    slot = pe.DIRECTORY_ENTRY_LOAD_CONFIG.struct.GuardCFDispatchFunctionPointer - pe.OPTIONAL_HEADER.ImageBase
    text = pe.sections[0]
    data = text.get_data()[: text.Misc_VirtualSize]
    for off in range(len(data) - 6):
        if data[off] == 0xFF and data[off + 1] == 0x15:
            rva = text.VirtualAddress + off
            disp = int.from_bytes(data[off + 2:off + 6], "little", signed=True)
            if rva + 6 + disp == slot:
                pe.set_bytes_at_rva(rva, bytes([0xFF, 0xD0, 0x90, 0x90, 0x90, 0x90]))
                return
    raise SystemExit("no guarded call in the image")


def damaged(src, out, edit):
    pe = pefile.PE(src)
    edit(pe)
    pe.write(out)


def main():
    image, mapfile = sys.argv[1], sys.argv[2]
    allow = sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "imports.allow")
    failed = 0
    rc, out = run(image, mapfile, allow)
    print(("ok   " if rc == 0 else "FAIL ") + "the good image passes")
    failed += rc != 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("NX_COMPAT cleared", "DllCharacteristics NX_COMPAT",
             lambda pe: setattr(pe.OPTIONAL_HEADER, "DllCharacteristics", pe.OPTIONAL_HEADER.DllCharacteristics & ~0x100)),
            ("checksum off by one", "checksum valid",
             lambda pe: setattr(pe.OPTIONAL_HEADER, "CheckSum", pe.OPTIONAL_HEADER.CheckSum + 1)),
            ("subsystem WINDOWS_GUI", "subsystem NATIVE",
             lambda pe: setattr(pe.OPTIONAL_HEADER, "Subsystem", 2)),
            ("entry point moved", "is the entry point",
             lambda pe: setattr(pe.OPTIONAL_HEADER, "AddressOfEntryPoint", pe.OPTIONAL_HEADER.AddressOfEntryPoint + 1)),
            ("a writable code section", "not W+X",
             lambda pe: setattr(pe.sections[0], "Characteristics", pe.sections[0].Characteristics | 0x80000000)),
        ]
        for name, expect, edit in cases:
            out_image = os.path.join(tmp, "bad.sys")
            damaged(image, out_image, edit)
            rc, out = run(out_image, mapfile, allow)
            ok = rc == 1 and any(l.startswith("FAIL") and expect in l for l in out.splitlines())
            print(("ok   " if ok else "FAIL ") + f"{name}: pecheck fails '{expect}'")
            failed += not ok
        # The release image passes --all-guarded; one call taken off the dispatch must fail it.
        rc, out = run(image, mapfile, allow, "--all-guarded")
        print(("ok   " if rc == 0 else "FAIL ") + "the good image passes --all-guarded")
        failed += rc != 0
        out_image = os.path.join(tmp, "bad.sys")
        damaged(image, out_image, unguard_one_call)
        rc, out = run(out_image, mapfile, allow, "--all-guarded")
        ok = rc == 1 and "FAIL every indirect call goes through the CFG dispatch pointer" in out
        print(("ok   " if ok else "FAIL ") + "a guarded call made `call rax`: pecheck --all-guarded fails")
        failed += not ok
        short_allow = os.path.join(tmp, "short.allow")
        with open(allow, encoding="utf-8") as f, open(short_allow, "w", encoding="utf-8") as g:
            g.writelines(l for l in f if "ExAllocatePool2" not in l)
        rc, out = run(image, mapfile, short_allow)
        ok = rc == 1 and "FAIL import ntoskrnl.exe!ExAllocatePool2 on the allowlist" in out
        print(("ok   " if ok else "FAIL ") + "an import missing from the allowlist fails")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
