"""Tests of scripts/tls-across-awaits on listings shaped like objdump's: the reuse of a
thread-local's address across a suspension is found, the fresh computations are not.

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import importlib.machinery
import importlib.util
import os
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls-across-awaits")
loader = importlib.machinery.SourceFileLoader("tls_across_awaits_script", SCRIPT)
spec = importlib.util.spec_from_loader(loader.name, loader)
tls = importlib.util.module_from_spec(spec)
loader.exec_module(tls)

# AsyncSemaphore.run's resume function as the release build of imgw had it: the thread-local's
# address comes from the async context (r14), then the gettid syscall; %fs only later.
REUSED = """
000000000055fb40 <$s12AsyncToolkit0A9SemaphoreV3runyxxyYaKXEYaKs8SendableRzlFTY6_>:
  55fb55:	mov    0x68(%r14),%r13
  55fb59:	mov    0x0(%r13),%edi
  55fb5d:	test   %edi,%edi
  55fb5f:	jne    55fb74 <x>
  55fb61:	mov    $0xba,%edi
  55fb68:	call   25a2a0 <syscall@plt>
  55fbaf:	data16 data16 data16 mov %fs:0x0,%rax
"""

# The same, with the address computed from %fs first (what a frame of its own does).
FRESH = """
000000000055fc90 <$s12AsyncToolkit0A9ConditionC8withLockyqd__qd__xzKXEKlF>:
  55fcaf:	data16 data16 data16 mov %fs:0x0,%rax
  55fcbe:	mov    -0x9c(%rax),%eax
  55fcc8:	mov    $0xba,%edi
  55fcd6:	call   25a2a0 <syscall@plt>
000000000055fd00 <$s12AsyncToolkit0A9SemaphoreV3runyxxyYaKXEYaKs8SendableRzlFTY7_>:
  55fd08:	data16 data16 data16 mov %fs:0x0,%rax
  55fd10:	mov    $0xba,%edi
"""

# A synchronous function whose %fs access was hoisted out of sight: not a resume function.
SYNC = """
0000000000560000 <$s12AsyncToolkit0A9ConditionC4readyqd__qd__xXElF>:
  560010:	mov    $0xba,%edi
"""


class TLSAcrossAwaitsTests(unittest.TestCase):
    def test_reuse_found(self):
        self.assertEqual(tls.suspects_in(REUSED), ["$s12AsyncToolkit0A9SemaphoreV3runyxxyYaKXEYaKs8SendableRzlFTY6_"])

    def test_fresh_and_sync_not_found(self):
        self.assertEqual(tls.suspects_in(FRESH + SYNC), [])

    def test_each_function_counted_once(self):
        self.assertEqual(len(tls.suspects_in(REUSED + REUSED.replace("TY6_", "TY8_"))), 2)


if __name__ == "__main__":
    unittest.main()
