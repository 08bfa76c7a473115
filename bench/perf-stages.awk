# Groups `perf report --no-children --sort dso,sym --stdio -g none` lines into stages of
# the platform's work, by the function (or, for guest code, the file) each sample was
# taken in, and prints "share% us stage" per stage; `per` is the process's CPU time per
# unit of work (a request, a match), in microseconds. Used by bench/profile-*.sh.
#
#   perf report ... | awk -v per=89.1 -f bench/perf-stages.awk | sort -rn
/^ +[0-9.]+%/ {
    share = $1; sub("%", "", share)
    dso = $2
    symbol = $0; sub(/^ *[0-9.]+% +[^ ]+ +/, "", symbol)
    stage = "other (hashing, collections, std)"
    if (symbol ~ /^\[k\]/) {
        if (symbol ~ /finish_task_switch|spin_unlock_irq|schedule|futex|wake|enqueue|dequeue|select_task|update_curr|pick_next|switch|ttwu|psi_|irqentry_exit|sched/)
            stage = "kernel: thread switches and wake-ups"
        else if (symbol ~ /tcp|sock|skb|ep_|epoll|ip_|inet|net|copy_from_iter|copy_to_iter|recv|send|loopback|napi|softirq|dev_/)
            stage = "kernel: sockets"
        else if (symbol ~ /pagemap|page|pte|pmd|mm_|vma|fault|madvise|mt_find|tlb|clear_/)
            stage = "kernel: memory (slot reset, page faults)"
        else
            stage = "kernel: other (syscall entry, timers)"
    }
    # Compiled components are mapped from the worker's cache (<hash>.cwasm), where perf
    # finds no symbols.
    else if (symbol ~ /wasm\[/ || dso ~ /\.cwasm$/) stage = "guest code"
    else if (symbol ~ /malloc|free|_int_|unlink_chunk|realloc|calloc|memalign|^\[\.\] _?mi_/) stage = "allocator (malloc, free)"
    else if (symbol ~ /memmove|memcpy|memset|memcmp/) stage = "memcpy, memset"
    else if (symbol ~ /redis::|faas_store::/) stage = "Redis client (key-value, messaging)"
    else if (symbol ~ /wasmtime_wasi|wasi/) stage = "WASI and wasi:http host"
    else if (symbol ~ /wasmtime|cranelift|InstancePre|component/) stage = "wasmtime: instantiate, calls, teardown"
    else if (symbol ~ /hyper|http::|h1::|httparse|bytes::/) stage = "hyper (HTTP/1.1)"
    else if (symbol ~ /tokio|mio|parking_lot|std::sync|syscall|epoll_wait|clock_gettime/) stage = "tokio, wake-ups, clocks"
    else if (symbol ~ /faas_/) stage = "platform code (faas_*)"
    else if (symbol ~ /tracing|prometheus/) stage = "tracing, metrics"
    total[stage] += share
}
END { for (stage in total) printf "%6.1f%% %8.1f  %s\n", total[stage], total[stage] * per / 100, stage }
