# SPDX-License-Identifier: Apache-2.0
# Builds every ./*.bpf.c into ./build/*.bpf.o (quiet unless V=1). Include after
# setting BPF_MK to the directory of this file.
include $(BPF_MK)/flags.mk
SRCS := $(wildcard *.bpf.c)
OBJS := $(patsubst %.bpf.c,build/%.bpf.o,$(SRCS))

all: $(OBJS)

build/%.bpf.o: %.bpf.c $(wildcard *.h) | build
	$(if $(Q),@echo "  BPF     $@")
	$(Q)$(CLANG) $(BPF_CFLAGS) -I. -c $< -o $@

build:
	$(Q)mkdir -p $@

clean:
	$(Q)rm -rf build
.PHONY: all clean
