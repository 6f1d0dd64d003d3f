#!/usr/bin/env bash
# Fill the slime/ submodule at its pinned commit when it is empty (a clone made without --recursive):
# from .gitmodules' URL, or from a git bundle of slime (SLIME_BUNDLE=PATH, for machines that cannot reach
# GitHub). A slime/ that is already filled is left as it is, whatever its commit: the dry run refuses a
# checkout at another commit and says how to pin it. `make install` and `make run` call this; so does .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle="${1:-${SLIME_BUNDLE:-}}"
if [ ! -e .git ]; then
    echo "fill-slime: $(pwd) is not a git checkout; give trainstack a slime checkout with slime.root (docs/install.md)"
    exit 0
fi
pinned="$(git ls-tree HEAD slime | awk '{print $3}')"
if [ -e slime/.git ]; then
    echo "slime/: filled, at $(git -C slime rev-parse --short=8 HEAD) (pinned: ${pinned:0:8})"
    exit 0
fi
url="$(git config -f .gitmodules submodule.slime.url)"
if [ -n "$bundle" ]; then
    if [ ! -f "$bundle" ]; then
        echo "fill-slime: SLIME_BUNDLE=$bundle is not a file (a git bundle of slime at ${pinned:0:8})" >&2
        exit 2
    fi
    echo "slime/: empty; filling it at ${pinned:0:8} from the bundle $bundle (its URL stays $url in .gitmodules)"
    git config submodule.slime.url "$(realpath "$bundle")"
    fill=(git -c protocol.file.allow=always submodule update --init slime)
else
    echo "slime/: empty; filling it at ${pinned:0:8} from $url (git submodule update --init slime)"
    fill=(git submodule update --init slime)
fi
if ! "${fill[@]}"; then
    echo "fill-slime: could not fill slime/ from ${bundle:-$url}. Offline, use a git bundle of slime at" \
         "${pinned:0:8}: \`make install SLIME_BUNDLE=/path/slime-${pinned:0:8}.bundle\`" >&2
    exit 2
fi
echo "slime/: at $(git -C slime rev-parse --short=8 HEAD)"
