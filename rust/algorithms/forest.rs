//! Forests given by a parent map i → next(i): the shared last step of MedoidShift and
//! QuickShift. Roots (next(i) = i) are the modes; every point is labelled by its root.

/// Turn `next` into a forest and return the root of every node.
///
/// A parent map can contain cycles (MedoidShift with ties or unusual kernels); each cycle is
/// broken by making its smallest index a root, so the result never depends on visit order.
/// O(N) time, iterative (no recursion depth limit).
pub fn resolve(next: &mut [usize]) -> Vec<usize> {
    const NEW: u8 = 0;
    const ON_PATH: u8 = 1;
    const DONE: u8 = 2;
    let n = next.len();
    let mut state = vec![NEW; n];
    let mut root = vec![usize::MAX; n];
    let mut path = Vec::new();
    for start in 0..n {
        if state[start] == DONE {
            continue;
        }
        path.clear();
        let mut v = start;
        while state[v] == NEW {
            state[v] = ON_PATH;
            path.push(v);
            v = next[v];
        }
        if state[v] == ON_PATH {
            // v closes a cycle (a self-loop is a cycle of length one).
            let at = path.iter().position(|&u| u == v).unwrap_or(0);
            let r = path[at..].iter().copied().min().unwrap_or(v);
            next[r] = r;
            root[r] = r;
            state[r] = DONE;
        }
        // Everything on the path now leads to a node whose root is known; fill backwards.
        for &u in path.iter().rev() {
            if state[u] != DONE {
                root[u] = root[next[u]];
                state[u] = DONE;
            }
        }
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_and_cycles() {
        // 0→1→2→2 ; 3→4→5→3 (cycle, smallest 3 becomes the root) ; 6→4
        let mut next = vec![1, 2, 2, 4, 5, 3, 4];
        let root = resolve(&mut next);
        assert_eq!(root, vec![2, 2, 2, 3, 3, 3, 3]);
        assert_eq!(next[3], 3);
        assert_eq!(next[4], 5);
        // Every node reaches its root by following next.
        for i in 0..next.len() {
            let mut v = i;
            for _ in 0..next.len() {
                v = next[v];
            }
            assert_eq!(v, root[i]);
        }
    }

    #[test]
    fn two_cycle_and_singletons() {
        let mut next = vec![1, 0, 2];
        let root = resolve(&mut next);
        assert_eq!(root, vec![0, 0, 2]);
        assert_eq!(next, vec![0, 0, 2]);
    }
}
