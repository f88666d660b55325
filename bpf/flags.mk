# SPDX-License-Identifier: Apache-2.0
# The one set of BPF compile flags, included by bpf/, tests/bpf/ and examples/ Makefiles.
ARCH := x86
CLANG ?= clang
# Debian keeps <asm/types.h> under the multiarch include dir, which -target bpf
# does not search.
MULTIARCH := $(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
BPF_CFLAGS_ANY_ARCH := -g -O2 -target bpf -Wall -Werror -idirafter /usr/include/$(MULTIARCH)
BPF_CFLAGS := $(BPF_CFLAGS_ANY_ARCH) -D__TARGET_ARCH_$(ARCH)
Q := $(if $(V),,@)
.DELETE_ON_ERROR:
