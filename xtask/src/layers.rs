//! The layering check of `cargo xtask lint`: no import cycle between the
//! daemon library's top-level modules (test code aside).
//!
//! Reads the module tree from `lib.rs` as the compiler would (files named
//! by `mod` items; `#[cfg(test)]` items and modules left out), collects
//! every path into the crate (`crate::…`, `super::…`, in `use` trees,
//! expressions, types, macro bodies and attribute strings such as serde's
//! `deserialize_with = "crate::…"`), and fails when the graph of which
//! top-level module uses which has a cycle, naming the files of each edge.
//! Owns only this reading; it must not build or run anything.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use syn::visit_mut::VisitMut;

/// Which files of `from` use `to`: (from, to) → files, relative to `src`.
type Edges = BTreeMap<(String, String), BTreeSet<String>>;

/// Fails, naming each cycle and the files that make it, when the top-level
/// modules of the library whose root is `src/lib.rs` import each other in
/// a cycle. Returns the top-level modules in an order where each one only
/// uses those before it, for the lint to print.
pub fn check(src: &Path) -> Result<Vec<String>> {
    let mut graph = Graph {
        src: src.to_path_buf(),
        tops: BTreeSet::new(),
        edges: Edges::new(),
    };
    let root = parse(&src.join("lib.rs"))?;
    graph.tops = root
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(module) if !is_test_only(&module.attrs) => {
                Some(module.ident.to_string())
            }
            _ => None,
        })
        .collect();
    graph.module(&[], &src.join("lib.rs"), root.items)?;

    let cycles = graph.cycles();
    if cycles.is_empty() {
        return Ok(graph.order());
    }
    let mut message = String::from(
        "the daemon's top-level modules import each other in a cycle (a layer may use only the \
         layers below it: move the shared piece down into a module both can use):\n",
    );
    for cycle in cycles {
        message.push_str(&format!("  cycle {}:\n", cycle.join(" ↔ ")));
        for ((from, to), files) in &graph.edges {
            if cycle.contains(from) && cycle.contains(to) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                message.push_str(&format!("    {from} → {to}: {}\n", files.join(", ")));
            }
        }
    }
    bail!("{message}")
}

struct Graph {
    src: PathBuf,
    tops: BTreeSet<String>,
    edges: Edges,
}

impl Graph {
    /// Reads the items of the module at `path` (its segments under the
    /// crate root), defined in `file`, and the modules it declares.
    fn module(&mut self, path: &[String], file: &Path, items: Vec<syn::Item>) -> Result<()> {
        for mut item in items {
            if is_test_only(item_attrs(&item)) {
                continue;
            }
            if let syn::Item::Mod(module) = item {
                let child: Vec<String> = path
                    .iter()
                    .cloned()
                    .chain([module.ident.to_string()])
                    .collect();
                match module.content {
                    Some((_, items)) => self.module(&child, file, items)?,
                    None => {
                        let child_file = module_file(file, &module.ident.to_string())?;
                        let items = parse(&child_file)?.items;
                        self.module(&child, &child_file, items)?;
                    }
                }
                continue;
            }
            // Items of the crate root (lib.rs's helpers) belong to no layer.
            let Some(top) = path.first() else { continue };
            let mut uses = Uses {
                module: path.to_vec(),
                targets: BTreeSet::new(),
            };
            uses.visit_item_mut(&mut item);
            let shown = file
                .strip_prefix(&self.src)
                .unwrap_or(file)
                .display()
                .to_string();
            for target in uses.targets {
                if &target != top && self.tops.contains(&target) {
                    self.edges
                        .entry((top.clone(), target))
                        .or_default()
                        .insert(shown.clone());
                }
            }
        }
        Ok(())
    }

    /// The sets of top-level modules that reach each other (strongly
    /// connected components of more than one module).
    fn cycles(&self) -> Vec<Vec<String>> {
        let reaches = |from: &String| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(next) = todo.pop() {
                for (a, b) in self.edges.keys() {
                    if *a == next && seen.insert(b.clone()) {
                        todo.push(b.clone());
                    }
                }
            }
            seen
        };
        let reach: BTreeMap<&String, BTreeSet<String>> =
            self.tops.iter().map(|top| (top, reaches(top))).collect();
        let mut cycles: Vec<Vec<String>> = Vec::new();
        for top in &self.tops {
            if !reach[top].contains(top) || cycles.iter().any(|cycle| cycle.contains(top)) {
                continue;
            }
            cycles.push(
                self.tops
                    .iter()
                    .filter(|other| reach[top].contains(*other) && reach[*other].contains(top))
                    .cloned()
                    .collect(),
            );
        }
        cycles
    }

    /// The top-level modules, each after every module it uses (the graph
    /// has no cycle).
    fn order(&self) -> Vec<String> {
        let mut placed: Vec<String> = Vec::new();
        while placed.len() < self.tops.len() {
            let before = placed.len();
            for top in &self.tops {
                let ready = !placed.contains(top)
                    && self
                        .edges
                        .keys()
                        .all(|(from, to)| from != top || placed.contains(to));
                if ready {
                    placed.push(top.clone());
                }
            }
            if placed.len() == before {
                break;
            }
        }
        placed
    }
}

/// Collects the top-level modules the paths of one item name.
struct Uses {
    module: Vec<String>,
    targets: BTreeSet<String>,
}

impl Uses {
    /// Records the top-level module a path (as segments) starts in, when
    /// it is a path into the crate.
    fn path(&mut self, segments: &[String]) {
        let resolved: Vec<&String> = match segments.first().map(String::as_str) {
            Some("crate") => segments[1..].iter().collect(),
            Some("super") => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let kept = self.module.len().saturating_sub(ups);
                self.module[..kept].iter().chain(&segments[ups..]).collect()
            }
            Some("self") => self.module.iter().chain(&segments[1..]).collect(),
            _ => return,
        };
        if let Some(first) = resolved.first() {
            self.targets.insert((*first).clone());
        }
    }

    /// Records the paths written in tokens the parser does not read as
    /// paths (a macro's body, an attribute's strings).
    fn tokens(&mut self, text: &str) {
        let text = text.replace(' ', "");
        for start in ["crate::", "super::"] {
            for (at, _) in text.match_indices(start) {
                let segments: Vec<String> = text[at..]
                    .split("::")
                    .map(|segment| {
                        segment
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect()
                    })
                    .take_while(|segment: &String| !segment.is_empty())
                    .collect();
                self.path(&segments);
            }
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => {
                prefix.push(name.ident.to_string());
                self.path(prefix);
                prefix.pop();
            }
            syn::UseTree::Rename(rename) => {
                prefix.push(rename.ident.to_string());
                self.path(prefix);
                prefix.pop();
            }
            syn::UseTree::Glob(_) => self.path(prefix),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl VisitMut for Uses {
    fn visit_item_mut(&mut self, item: &mut syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit_mut::visit_item_mut(self, item);
        }
    }

    fn visit_impl_item_mut(&mut self, item: &mut syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Fn(function) => &function.attrs,
            syn::ImplItem::Const(constant) => &constant.attrs,
            syn::ImplItem::Type(alias) => &alias.attrs,
            _ => return syn::visit_mut::visit_impl_item_mut(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit_mut::visit_impl_item_mut(self, item);
        }
    }

    fn visit_item_use_mut(&mut self, item: &mut syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        self.path(&segments);
        syn::visit_mut::visit_path_mut(self, path);
    }

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        self.tokens(&mac.tokens.to_string());
        syn::visit_mut::visit_macro_mut(self, mac);
    }

    fn visit_attribute_mut(&mut self, attr: &mut syn::Attribute) {
        if let syn::Meta::List(list) = &attr.meta {
            self.tokens(&list.tokens.to_string());
        }
        if let syn::Meta::NameValue(pair) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) = &pair.value
            && !pair.path.is_ident("doc")
        {
            self.tokens(&text.value());
        }
        syn::visit_mut::visit_attribute_mut(self, attr);
    }
}

fn parse(file: &Path) -> Result<syn::File> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    syn::parse_file(&text).with_context(|| format!("cannot parse {}", file.display()))
}

/// The file of module `name` declared in `parent` (`name.rs` or
/// `name/mod.rs`, beside `lib.rs`/`mod.rs` or under `parent`'s folder).
fn module_file(parent: &Path, name: &str) -> Result<PathBuf> {
    let stem = parent.file_stem().and_then(|stem| stem.to_str());
    let dir = parent.parent().context("a module file has a folder")?;
    let dir = match stem {
        Some("lib" | "mod" | "main") => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
        None => bail!("{} has no file name", parent.display()),
    };
    let candidates = [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ];
    candidates
        .iter()
        .find(|candidate| candidate.is_file())
        .cloned()
        .with_context(|| {
            format!(
                "module {name} of {} has no file ({} or {})",
                parent.display(),
                candidates[0].display(),
                candidates[1].display()
            )
        })
}

/// Whether attributes make an item exist only in tests (`#[cfg(test)]`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && matches!(&attr.meta, syn::Meta::List(list) if list.tokens.to_string() == "test")
    })
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(item) => &item.attrs,
        syn::Item::Enum(item) => &item.attrs,
        syn::Item::ExternCrate(item) => &item.attrs,
        syn::Item::Fn(item) => &item.attrs,
        syn::Item::ForeignMod(item) => &item.attrs,
        syn::Item::Impl(item) => &item.attrs,
        syn::Item::Macro(item) => &item.attrs,
        syn::Item::Mod(item) => &item.attrs,
        syn::Item::Static(item) => &item.attrs,
        syn::Item::Struct(item) => &item.attrs,
        syn::Item::Trait(item) => &item.attrs,
        syn::Item::TraitAlias(item) => &item.attrs,
        syn::Item::Type(item) => &item.attrs,
        syn::Item::Union(item) => &item.attrs,
        syn::Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway source tree, removed when dropped.
    struct Tree(PathBuf);

    impl Tree {
        fn with(name: &str, files: &[(&str, &str)]) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-layers-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (file, text) in files {
                let path = dir.join(file);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
            Self(dir)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn finds_a_cycle_through_use_groups_super_and_attribute_strings() {
        let dir = Tree::with(
            "cycle",
            &[
                ("lib.rs", "pub mod low;\npub mod high;\nfn helper() {}\n"),
                (
                    "low/mod.rs",
                    "mod inner;\n#[serde(with = \"crate::high::x\")]\nstruct S;\n",
                ),
                ("low/inner.rs", "fn f() { crate::helper(); }\n"),
                (
                    "high.rs",
                    "use crate::{low::{self}, helper};\nmod deep { use super::super::low; }\n",
                ),
            ],
        );
        let err = check(&dir.0).unwrap_err().to_string();
        assert!(err.contains("cycle high ↔ low"), "{err}");
        assert!(err.contains("low → high: low/mod.rs"), "{err}");
        assert!(err.contains("high → low: high.rs"), "{err}");
    }

    #[test]
    fn test_code_makes_no_edge_and_the_order_puts_leaves_first() {
        let dir = Tree::with(
            "tests",
            &[
                (
                    "lib.rs",
                    "pub mod low;\npub mod high;\n#[cfg(test)]\nmod testing;\n",
                ),
                (
                    "low.rs",
                    "#[cfg(test)]\nmod tests { use crate::high; }\n#[cfg(test)]\nfn t() { crate::high::f(); }\n",
                ),
                ("high.rs", "pub fn f() { crate::low::g(); }\n"),
            ],
        );
        assert_eq!(check(&dir.0).unwrap(), ["low", "high"]);
    }
}
