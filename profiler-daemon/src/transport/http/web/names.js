// profilerd's web view: which frames a function typed by a person is
// (loaded before tables.js and app.js, whose search and sandwich use it).
//
// namesFunction and aliasOf MIRROR the Rust rule of
// profiler-daemon/words/src/function_names.rs (FunctionName::matches,
// alias_of), which callers, annotate and diff follow: change both
// together. A test of the daemon (transport/http/names_mirror.rs) runs
// this file under node and holds its answers to the Rust ones.
"use strict";

// The C library's prefixes of internal aliases of a public function,
// longest first: glibc names malloc's own code __GI___libc_malloc.
const ALIAS_PREFIXES = ["__GI___libc_", "__GI___", "__GI_", "__libc_"];

// The public name `name` is an alias of: without a symbol version
// (@@GLIBC_2.2.5) and an alias prefix; `name` itself otherwise.
function aliasOf(name) {
  const at = name.indexOf("@");
  const bare = at >= 0 ? name.slice(0, at) : name;
  for (const prefix of ALIAS_PREFIXES) {
    if (bare.startsWith(prefix)) {
      const rest = bare.slice(prefix.length);
      return rest ? rest : bare;
    }
  }
  return bare;
}

// Whether a frame whose function is `name` is the function `asked`: the
// same name, one that ends with "::" and it (spin finds app::spin), or the
// same public name once versions and the C library's alias prefixes are
// taken off both (malloc finds __GI___libc_malloc). An empty name matches
// nothing.
function namesFunction(name, asked) {
  if (!asked) return false;
  return (
    name === asked ||
    (name.endsWith(asked) && name.slice(0, name.length - asked.length).endsWith("::")) ||
    aliasOf(name) === aliasOf(asked)
  );
}

// A drawn frame's function: its name in the folded lines without what
// they add to it, the `_[k]` (kernel) or `_[i]` (inlined) suffix and a
// Python frame's ` (file:line)`.
function frameFunction(frame) {
  return frame.replace(/_\[[ki]\]$/, "").replace(/ \([^()]*:\d+\)$/, "");
}

// Whether the drawn frame `frame` matches the search `term`: it is the
// function named so, or its name holds the term as typed.
function searchMatches(frame, term) {
  return Boolean(term) && (namesFunction(frameFunction(frame), term) || frame.includes(term));
}
