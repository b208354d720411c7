#!/bin/sh
# librdzv.so exports exactly the functions declared in rdzv.h: nothing of
# rdzv_common or of the transport leaks into engine processes.
# Usage: exports_test.sh LIBRDZV_SO RDZV_H
lib=$1
header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '{print $3}' | sort >"$tmp/exported"
grep -oE '\brdzv_[a-z_]+\(' "$header" | tr -d '(' | sort -u >"$tmp/declared"
if ! diff "$tmp/exported" "$tmp/declared"; then
    echo "exports_test: librdzv exports (<) and rdzv.h declares (>) differ"
    exit 1
fi
