# Real applications (Debian's LAMMPS, HPCC, GROMACS) under huddle run, installed here only.
TEST_STEPS += test-apps

.PHONY: test-apps
test-apps:
	scripts/bootstrap --apps
	tests/apps/short.sh
