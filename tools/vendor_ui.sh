#!/usr/bin/env bash
# Re-vendors the chat page's front-end libraries (api/ui/static/vendor/) from the npm registry
# at the pinned versions below. Run by hand when a version changes; the served page never
# reaches the network (no CDN), and nothing here runs at install or serve time.
set -euo pipefail
MARKED=18.2.1          # Markdown to HTML (MIT)
DOMPURIFY=3.5.0        # sanitizes that HTML before it enters the page (MPL-2.0 OR Apache-2.0)
HIGHLIGHT=11.12.0      # code highlighting, the common-languages build (BSD-3-Clause)
cd "$(dirname "$0")/.."
VENDOR=api/ui/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "marked@$MARKED" "dompurify@$DOMPURIFY" "@highlightjs/cdn-assets@$HIGHLIGHT" >/dev/null)
unpack() { mkdir -p "$work/$1" && tar xzf "$work/$2" -C "$work/$1" --strip-components=1; }
unpack marked "marked-$MARKED.tgz"
unpack dompurify "dompurify-$DOMPURIFY.tgz"
unpack highlight "highlightjs-cdn-assets-$HIGHLIGHT.tgz"
rm -rf "$VENDOR" && mkdir -p "$VENDOR/licenses"
cp "$work/marked/lib/marked.umd.js" "$VENDOR/marked.umd.js"
cp "$work/dompurify/dist/purify.min.js" "$VENDOR/purify.min.js"
cp "$work/highlight/highlight.min.js" "$VENDOR/highlight.min.js"
cp "$work/highlight/styles/github.min.css" "$VENDOR/highlight-light.min.css"
cp "$work/highlight/styles/github-dark.min.css" "$VENDOR/highlight-dark.min.css"
cp "$work/marked/LICENSE" "$VENDOR/licenses/marked.LICENSE"
cp "$work/dompurify/LICENSE" "$VENDOR/licenses/dompurify.LICENSE"
cp "$work/highlight/LICENSE" "$VENDOR/licenses/highlight.js.LICENSE"
cat > "$VENDOR/VERSIONS" <<VERSIONS
marked $MARKED MIT
dompurify $DOMPURIFY MPL-2.0 OR Apache-2.0
@highlightjs/cdn-assets $HIGHLIGHT BSD-3-Clause
VERSIONS
(cd "$VENDOR" && sha256sum ./*.js ./*.css > SHA256SUMS)
