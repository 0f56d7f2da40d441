//! Applying our patches: multi-file unified diffs split per file and applied with `diffy`,
//! every hunk's context required to match exactly where its header says.

use std::path::{Component, Path};

use anyhow::{anyhow, bail, Context, Result};

use super::tree::write_file;

/// One file's part of a multi-file unified diff.
#[derive(Debug)]
struct FilePatch {
    /// The original path relative to the crate root; `None` for a new file (`/dev/null`).
    old: Option<String>,
    /// The resulting path; `None` for a deleted file (`/dev/null`).
    new: Option<String>,
    /// The `---`/`+++` header and the hunks, as `diffy::Patch` parses them.
    text: String,
}

impl FilePatch {
    /// The file the patch changes.
    fn path(&self) -> &str {
        self.new
            .as_deref()
            .or(self.old.as_deref())
            .unwrap_or_default()
    }
}

/// Splits a multi-file unified diff into per-file patches, at `diff …` lines or at a
/// `---`/`+++` header pair outside a hunk. Hunk bodies are consumed by their line counts, so a
/// removed line that starts with `-- ` is not mistaken for a header. Preamble lines (`index`,
/// `new file mode`, …) are skipped; renames, copies and binary diffs are errors.
fn split_patch(text: &str) -> Result<Vec<FilePatch>> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = Vec::new();
    let mut cur: Option<(FilePatch, usize)> = None; // the patch and its hunk count
    let (mut old_left, mut new_left) = (0usize, 0usize);
    // The line of a `diff …` line whose `---`/`+++` header has not come yet.
    let mut pending_diff: Option<usize> = None;
    let headerless = |line: usize| {
        anyhow!(
            "the diff at line {line} has no `---`/`+++` header (a mode change, empty file, \
             rename or binary diff): unsupported"
        )
    };
    let finish = |cur: &mut Option<(FilePatch, usize)>, out: &mut Vec<FilePatch>| -> Result<()> {
        if let Some((fp, hunks)) = cur.take() {
            if hunks == 0 {
                bail!("the diff of {} has no hunks", fp.path());
            }
            out.push(fp);
        }
        Ok(())
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let n = i + 1;
        i += 1;
        if old_left > 0 || new_left > 0 {
            match line.as_bytes().first() {
                Some(b' ') => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                }
                Some(b'-') => old_left = old_left.saturating_sub(1),
                Some(b'+') => new_left = new_left.saturating_sub(1),
                Some(b'\\') => {}
                _ => bail!("line {n}: malformed hunk line {:?}", line.trim_end()),
            }
            if let Some((fp, _)) = cur.as_mut() {
                fp.text.push_str(line);
            }
            continue;
        }
        if line.starts_with('\\') {
            // "\ No newline at end of file" after a hunk's last line.
            match cur.as_mut() {
                Some((fp, h)) if *h > 0 => fp.text.push_str(line),
                _ => bail!("line {n}: stray {:?}", line.trim_end()),
            }
        } else if line.starts_with("diff ") {
            if let Some(at) = pending_diff {
                return Err(headerless(at));
            }
            finish(&mut cur, &mut out)?;
            pending_diff = Some(n);
        } else if line.starts_with("--- ")
            && lines.get(i).is_some_and(|next| next.starts_with("+++ "))
        {
            finish(&mut cur, &mut out)?;
            pending_diff = None;
            let plus = lines[i];
            i += 1;
            let fp = FilePatch {
                old: header_path(line, "--- ", "a/").with_context(|| format!("line {n}"))?,
                new: header_path(plus, "+++ ", "b/").with_context(|| format!("line {}", n + 1))?,
                text: format!("{line}{plus}"),
            };
            if fp.old.is_none() && fp.new.is_none() {
                bail!("line {n}: both sides are /dev/null");
            }
            cur = Some((fp, 0));
        } else if line.starts_with("@@ ") {
            let Some((fp, hunks)) = cur.as_mut() else {
                bail!("line {n}: hunk before a `---`/`+++` header");
            };
            (old_left, new_left) =
                hunk_counts(line).with_context(|| format!("line {n}: bad hunk header"))?;
            fp.text.push_str(line);
            *hunks += 1;
        } else if [
            "rename ",
            "copy ",
            "similarity ",
            "GIT binary patch",
            "Binary files ",
        ]
        .iter()
        .any(|p| line.starts_with(p))
        {
            bail!("line {n}: unsupported diff ({:?})", line.trim_end());
        }
        // Anything else is a preamble line: `index …`, `new file mode …`, `Only in …`.
    }
    if old_left > 0 || new_left > 0 {
        bail!("the patch ends inside a hunk");
    }
    if let Some(at) = pending_diff {
        return Err(headerless(at));
    }
    finish(&mut cur, &mut out)?;
    if out.is_empty() {
        bail!("no file diffs found");
    }
    Ok(out)
}

/// The path of a `--- a/…` or `+++ b/…` header without its prefix (and `diff -u`'s tab and
/// timestamp); `None` for `/dev/null`.
fn header_path(line: &str, marker: &str, prefix: &str) -> Result<Option<String>> {
    let rest = line
        .strip_prefix(marker)
        .unwrap_or(line)
        .trim_end_matches(['\n', '\r']);
    let path = rest.split('\t').next().unwrap_or(rest).trim_end();
    if path == "/dev/null" {
        return Ok(None);
    }
    let rel = path
        .strip_prefix(prefix)
        .ok_or_else(|| anyhow!("expected a path starting with `{prefix}`, got {path:?}"))?;
    let ok = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !ok || rel.starts_with('"') {
        bail!("unsupported path {path:?} (must be plain and relative to the crate root)");
    }
    Ok(Some(rel.to_string()))
}

/// The old and new line counts of a `@@ -a,b +c,d @@` header.
fn hunk_counts(line: &str) -> Result<(usize, usize)> {
    let mut parts = line.split_whitespace().skip(1);
    let mut count = |sign: char| -> Result<usize> {
        let r = parts
            .next()
            .and_then(|p| p.strip_prefix(sign))
            .ok_or_else(|| anyhow!("missing {sign} range"))?;
        Ok(match r.split_once(',') {
            Some((_, len)) => len.parse()?,
            None => 1,
        })
    };
    Ok((count('-')?, count('+')?))
}

/// Applies one file's patch to its original text (`None` for a new file), requiring every
/// hunk's context to match at exactly the line its header names. Returns the new text, or
/// `None` when the file is deleted.
fn apply_file_patch(base: Option<&str>, fp: &FilePatch) -> Result<Option<String>> {
    let base = match (base, &fp.old) {
        (Some(_), None) => bail!("creates {}, which already exists", fp.path()),
        (None, Some(old)) => bail!("changes {old}, which does not exist"),
        (b, _) => b.unwrap_or_default(),
    };
    let patch = diffy::Patch::from_str(&fp.text).map_err(|e| anyhow!("{}: {e}", fp.path()))?;
    let base_lines: Vec<&str> = base.split_inclusive('\n').collect();
    for (i, hunk) in patch.hunks().iter().enumerate() {
        let pre: Vec<&str> = hunk
            .lines()
            .iter()
            .filter_map(|l| match l {
                diffy::Line::Context(s) | diffy::Line::Delete(s) => Some(*s),
                diffy::Line::Insert(_) => None,
            })
            .collect();
        let range = hunk.old_range();
        // An empty old range names the line after which the hunk inserts.
        let start = if range.is_empty() {
            range.start()
        } else {
            range.start().saturating_sub(1)
        };
        if base_lines.get(start..start + pre.len()) != Some(pre.as_slice()) {
            bail!(
                "{}: hunk #{} (@@ -{},{} @@) does not apply: the file differs from its context",
                fp.path(),
                i + 1,
                range.start(),
                range.len()
            );
        }
    }
    let patched = diffy::apply(base, &patch).map_err(|e| anyhow!("{}: {e}", fp.path()))?;
    match &fp.new {
        None if !patched.is_empty() => bail!("deletes {} but leaves text behind", fp.path()),
        None => Ok(None),
        Some(_) => Ok(Some(patched)),
    }
}

/// Applies a multi-file patch to the crate copied to `dir`.
pub(super) fn apply_patch_to_dir(dir: &Path, text: &str) -> Result<()> {
    for fp in split_patch(text)? {
        if let (Some(old), Some(new)) = (&fp.old, &fp.new) {
            if old != new {
                bail!("renames {old} to {new}; renames are not supported");
            }
        }
        let path = dir.join(fp.path());
        let base = match std::fs::read(&path) {
            Ok(bytes) => Some(
                String::from_utf8(bytes).map_err(|_| anyhow!("{} is not UTF-8 text", fp.path()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        match apply_file_patch(base.as_deref(), &fp)? {
            Some(t) => write_file(&path, t.as_bytes())?,
            None => std::fs::remove_file(&path)
                .with_context(|| format!("removing {}", path.display()))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project_root;

    const PATCH: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,4 +1,5 @@
 mod a;
-mod b;
+mod b2;
+mod rocm;
 -- not a header
 pub use a::*;
diff --git a/src/rocm.rs b/src/rocm.rs
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/src/rocm.rs
@@ -0,0 +1,2 @@
+//! ROCm slot.
+pub struct Slot;
--- a/README.md\t2024-01-01 00:00:00.000000000 +0000
+++ b/README.md\t2024-01-02 00:00:00.000000000 +0000
@@ -1 +1 @@
-old
\\ No newline at end of file
+new
";

    const LIB: &str = "mod a;\nmod b;\n-- not a header\npub use a::*;\n";

    #[test]
    fn multi_file_patch_is_split_and_applied() {
        let parts = split_patch(PATCH).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].old.as_deref(), Some("src/lib.rs"));
        assert_eq!(parts[1].old, None);
        assert_eq!(parts[1].new.as_deref(), Some("src/rocm.rs"));
        assert_eq!(parts[2].path(), "README.md");

        let lib = apply_file_patch(Some(LIB), &parts[0]).unwrap();
        assert_eq!(
            lib.as_deref(),
            Some("mod a;\nmod b2;\nmod rocm;\n-- not a header\npub use a::*;\n")
        );
        let new = apply_file_patch(None, &parts[1]).unwrap();
        assert_eq!(new.as_deref(), Some("//! ROCm slot.\npub struct Slot;\n"));
        let readme = apply_file_patch(Some("old"), &parts[2]).unwrap();
        assert_eq!(readme.as_deref(), Some("new\n"));
    }

    #[test]
    fn patch_applies_to_a_directory() {
        let dir = project_root().join(format!("target/xtask/test-patch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_file(&dir.join("src/lib.rs"), LIB.as_bytes()).unwrap();
        write_file(&dir.join("README.md"), b"old").unwrap();
        write_file(&dir.join("gone.txt"), b"x\n").unwrap();
        let delete = "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
        apply_patch_to_dir(&dir, &format!("{PATCH}{delete}")).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("src/rocm.rs"), "//! ROCm slot.\npub struct Slot;\n");
        assert!(read("src/lib.rs").contains("mod rocm;\n"));
        assert_eq!(read("README.md"), "new\n");
        assert!(!dir.join("gone.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mismatched_context_is_an_error() {
        let parts = split_patch(PATCH).unwrap();
        let err = apply_file_patch(Some("mod a;\nmod c;\n"), &parts[0]).unwrap_err();
        assert!(err.to_string().contains("does not apply"), "{err}");
        // The right text one line lower: diffy would apply it at an offset; we do not.
        let shifted = format!("// header\n{LIB}");
        assert!(apply_file_patch(Some(&shifted), &parts[0]).is_err());
        // New file that exists, changed file that does not.
        assert!(apply_file_patch(Some(""), &parts[1]).is_err());
        assert!(apply_file_patch(None, &parts[0]).is_err());
    }
}
