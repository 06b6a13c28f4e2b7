# session h's first call (branch k-rows, switch off = main's kernels): run 34, then run 33 in the time left
T0=$SECONDS
bash notes/scripts/run34.sh
echo "run 34 done at $((SECONDS - T0)) s"
RUN33_LIMIT=$((570 - (SECONDS - T0))) bash notes/scripts/run33.sh
echo "all done at $((SECONDS - T0)) s"
