# msg: the MPI C test programs, built with huddle-cc and run with `huddle launch`
# (the release build of the workspace provides huddle, huddle-cc and libhuddle_msg.so).
TEST_STEPS += test-msg-c

.PHONY: test-msg-c
test-msg-c:
	tests/msg/run --peers
