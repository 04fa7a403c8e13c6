"""Mutations of SECURITY.md rows 396-399, the one read of a listed release file (see table.py for what a mutation
is)."""

from __future__ import annotations

from table import Mutation

READS = "tests/test_media_reads.py::"
ONE = "tests/test_media_one_read.py::"
VERIFIER = "gkeys_portage/verify/media/verifier.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(396, "the journal's digests come from a read of their own", VERIFIER,
             "            digests = {name: states[name].hexdigest() for name in plan}",
             "            digests = read_once(path, plan)[0]", (READS + "test_a_listed_file_is_read_once",)),
    Mutation(396, "a lone .asc's journal digest is hashed in a pass of its own", "gkeys_portage/verify/media/passes.py",
             "            if tee.complete:", "            if False:",
             (READS + "test_a_lone_asc_is_read_twice_side_by_side",)),
    Mutation(397, "a statement that disagrees is forgiven when another agrees", VERIFIER,
             "                if actual != listed:", "                if actual != listed and len(expected) == 1:",
             (READS + "test_a_sibling_that_disagrees_still_refuses",)),
    Mutation(397, "statements that contradict each other are accepted", VERIFIER,
             "            if said != listed:", "            if False:",
             (ONE + "test_signed_statements_that_contradict_each_other_are_refused",)),
    Mutation(397, "statements that contradict each other on the CONTENTS are accepted", VERIFIER,
             "            _agreeing(path.name, expected)\n            digests, _ = read_once(",
             "            digests, _ = read_once(",
             (ONE + "test_statements_that_contradict_each_other_on_the_contents_are_refused",)),
    Mutation(397, "a statement signed after the look verifies beside the engines, never compared", VERIFIER,
             "            if late:", "            if False:",
             (ONE + "test_a_statement_signed_after_it_was_looked_at_is_refused",)),
    Mutation(398, "the .asc's digest prefix is not compared", "gkeys_portage/verify/media/prefix.py",
             "        if digest.digest()[:2] != prefix.left16:", "        if False:",
             (READS + "test_a_sibling_that_disagrees_still_refuses",
              ONE + "test_an_asc_beside_a_sha256_alone_is_compared_on_its_own_hash")),
    Mutation(398, "the .asc's 16-bit prefix is compared before the statements' digests", VERIFIER,
             "            self._compare(path.name, expected, digests, result)  # first: a tampered file is named as "
             "such\n            if signature is not None:  # then the .asc, which only must not disagree\n"
             "                listed_by = \", \".join(s.source for s in statements)\n"
             "                result.asides += asc_agrees(path.name, signature, states, listed_by)\n",
             "            if signature is not None:\n"
             "                listed_by = \", \".join(s.source for s in statements)\n"
             "                result.asides += asc_agrees(path.name, signature, states, listed_by)\n"
             "            self._compare(path.name, expected, digests, result)\n            if signature is not None:\n",
             (ONE + "test_a_tampered_file_beside_its_genuine_asc_is_named_by_the_statement",)),
    Mutation(398, "the .asc's own hash is not added to the one read", VERIFIER,
             "[*plan, *asc_hashes(signature)]", "[*plan]",
             (ONE + "test_an_asc_beside_a_sha256_alone_is_compared_on_its_own_hash",)),
    Mutation(398, "an .asc that is no signature is ignored beside a listing statement",
             "gkeys_portage/verify/media/passes.py",
             "    except NoSignatureError as exc:\n        raise exc.reworded(f\"{source}: {exc.message}\") from exc\n"
             "    if bad:",
             "    except NoSignatureError:\n        return []\n    if bad:",
             (READS + "test_an_asc_that_is_no_signature_beside_a_listing_statement_refuses",)),
    Mutation(399, "a pipe or a device is read as the medium", "gkeys_portage/core/fs/regular.py",
             "    if not stat.S_ISREG(os.fstat(fd).st_mode):", "    if False:",
             ("tests/test_media_pinned.py::test_a_fifo_put_at_the_name_after_the_look_is_refused_at_once",)),
    Mutation(399, "the medium's open waits for a FIFO's writer", "gkeys_portage/core/fs/regular.py",
             "os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY", "os.O_RDONLY | os.O_CLOEXEC",
             ("tests/test_media_pinned.py::test_a_fifo_put_at_the_name_after_the_look_is_refused_at_once",)),
)

#: Rows 396-399 with no mutation yet, and why.
UNMUTATED: dict[int, str] = {}
