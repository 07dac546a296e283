# The grader's runner: started as
#   python3 -I -c <this file> <solution.py> <status.json> <memory bytes> <file size bytes> <cpu seconds>
# in the solution's private directory. It sets the resource limits, compiles
# the solution (a failure is a syntax error), runs it as __main__ and writes
# what happened to the status file. The grader trusts the status file only
# to tell a syntax error from a runtime error; the submission is checked by
# the grader itself.
import json
import os
import resource
import sys
import traceback

# The status file's path is made absolute now: a solution may change its
# working directory before the runner writes what happened.
sol, status_path = sys.argv[1], os.path.abspath(sys.argv[2])
mem, fsize, cpu = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])


def write(d):
    with open(status_path, "w") as f:
        json.dump(d, f)


def limit(which, n):
    if n > 0:
        resource.setrlimit(which, (n, n))


limit(resource.RLIMIT_AS, mem)
limit(resource.RLIMIT_FSIZE, fsize)
limit(resource.RLIMIT_CPU, cpu)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

with open(sol, "rb") as f:
    src = f.read()
try:
    code = compile(src, "solution.py", "exec")
except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte in the source
    write({"status": "syntax_err", "error_type": type(e).__name__,
           "error_line": getattr(e, "lineno", 0) or 0, "message": str(e)[:500]})
    sys.exit(10)

write({"status": "running"})
try:
    exec(code, {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__})
except SystemExit as e:
    if e.code not in (None, 0):
        write({"status": "runtime_err", "error_type": "SystemExit", "error_line": 0, "message": str(e.code)[:500]})
        sys.exit(11)
except BaseException as e:
    line = 0
    for fr in traceback.extract_tb(e.__traceback__):
        if fr.filename == "solution.py":
            line = fr.lineno or 0
    name = "MemoryError" if isinstance(e, MemoryError) else type(e).__name__
    write({"status": "runtime_err", "error_type": name, "error_line": line, "message": str(e)[:500]})
    traceback.print_exc()
    sys.exit(11)
write({"status": "ran"})
sys.exit(0)
