# Progress lines of the long scripts (make demo, bench, soak), sourced by them, so that a
# run of minutes never looks hung: one line per step on stderr, with the step count and
# the time since the start.
#   progress_start TAG TOTAL   TOTAL steps to come (may be "?")
#   progress WHAT...           "TAG [k/TOTAL  Ns] WHAT" (k counts the steps)
#   progress_note WHAT...      "TAG [Ns] WHAT", not a step

progress_start() {
  PROGRESS_TAG=$1
  PROGRESS_TOTAL=$2
  PROGRESS_STEP=0
  PROGRESS_T0=$SECONDS
}

progress() {
  PROGRESS_STEP=$((${PROGRESS_STEP:-0} + 1))
  printf '%s [%d/%s %4ds] %s\n' "${PROGRESS_TAG:-}" "$PROGRESS_STEP" "${PROGRESS_TOTAL:-?}" \
    $((SECONDS - ${PROGRESS_T0:-0})) "$*" >&2
}

progress_note() {
  printf '%s [%4ds] %s\n' "${PROGRESS_TAG:-}" $((SECONDS - ${PROGRESS_T0:-0})) "$*" >&2
}
