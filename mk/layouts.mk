# tests/layouts: OpenMP programs in C and Fortran laid out like real HPC codes (all big data
# static: .bss and .data, no heap) with an exactly known communication pattern; each writes
# ground-truth.csv and workload.json. -ffp-contract=off keeps the two bit-identical (same
# checksum) even where -march would allow FMA in one and not the other.
LAYOUTS_BUILD := build/layouts
LAYOUTS_FLAGS := -O2 -fopenmp -ffp-contract=off -Wall

BUILD_STEPS += build-layouts
TEST_STEPS += test-layouts

.PHONY: build-layouts test-layouts

build-layouts: $(LAYOUTS_BUILD)/layout-c $(LAYOUTS_BUILD)/layout-f

$(LAYOUTS_BUILD)/layout-c: tests/layouts/layout.c
	@mkdir -p $(@D)
	gcc $(LAYOUTS_FLAGS) -Wextra -Werror -o $@ $< -lm

# -J: the .mod files go to the build folder, not the current one.
$(LAYOUTS_BUILD)/layout-f: tests/layouts/layout.f90
	@mkdir -p $(@D)
	gfortran $(LAYOUTS_FLAGS) -Werror -J $(@D) -o $@ $<

test-layouts: build-layouts
	tests/layouts/check
