#!/usr/bin/env python3
"""Tests of scripts/check-layers.py on crates written to a temporary directory. Run: python3 scripts/check-layers-test.py"""

import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check-layers.py")


def crate(root, files):
    """Writes a crate (relative path under src/ → text) into root and returns its directory."""
    for path, text in files.items():
        full = os.path.join(root, "src", path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def check(*crates):
    done = subprocess.run([sys.executable, SCRIPT, *crates], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


class CheckLayers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_a_circle_between_two_files_fails_naming_both_and_the_imports(self):
        root = crate(self.dir.name, {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::Bee;\npub struct Ay;\n",
            "b.rs": "pub struct Bee(crate::a::Ay);\n",
        })
        code, out = check(root)
        self.assertEqual(code, 1, out)
        self.assertIn("src/a.rs -> " + os.path.join(root, "src/b.rs") + " (crate::b::Bee)", out)
        self.assertIn("src/b.rs -> " + os.path.join(root, "src/a.rs") + " (crate::a::Ay)", out)

    def test_a_circle_through_groups_super_and_nested_files_fails(self):
        root = crate(self.dir.name, {
            "main.rs": "mod cmd;\nmod shared;\nfn main() {}\n",
            "cmd/mod.rs": "pub mod chat;\npub struct Mode;\n",
            "cmd/chat.rs": "use super::Mode;\n",
            "shared.rs": "use crate::{cmd::{chat, self}, shared as _};\n",
            "cmd/run.rs": "",
        })
        with open(os.path.join(root, "src/cmd/mod.rs"), "a", encoding="utf-8") as f:
            f.write("fn f() { crate::shared::go(); }\n")
        code, out = check(root)
        self.assertEqual(code, 1, out)
        files = ", ".join(os.path.join(root, "src", f) for f in ("cmd/chat.rs", "cmd/mod.rs", "shared.rs"))
        self.assertIn("between " + files + ":", out)

    def test_imports_that_point_one_way_pass(self):
        root = crate(self.dir.name, {
            "lib.rs": "mod a;\nmod b;\npub use a::Ay;\n",
            "a.rs": "use crate::b::Bee;\npub struct Ay(Bee);\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            "b.rs": "// crate::a::Ay in a comment\npub struct Bee;\nconst S: &str = \"crate::a\";\n",
        })
        self.assertEqual(check(root), (0, ""))

    def test_a_directory_that_is_not_a_crate_is_refused(self):
        code, out = check(self.dir.name)
        self.assertEqual(code, 2)
        self.assertIn("has no src/ directory", out)


if __name__ == "__main__":
    unittest.main()
