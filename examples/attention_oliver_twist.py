"""The paper's experiment 5: attention as a temporal local mean, with query/key/value kernels and a
position kernel learned from Oliver Twist by Adam on the native attention gradients.

Prints the held-out perplexity of a unigram model, an interpolated bigram model, the learned
local-mode (QKV) model and a one-layer HierarchicalLocalModel trained the same way, and writes
three figures: the learned 2-D query/key coordinates of the most frequent words, the attention
graph of one held-out sentence, and the validation perplexity per epoch.

    python examples/attention_oliver_twist.py                       # the novel shipped with the package
    python examples/attention_oliver_twist.py --data /path/to/oliver_twist.txt --epochs 10
    python examples/attention_oliver_twist.py --max-words 30000     # a quick run
"""

import argparse
import sys

from localization.cli import _build_attention, cmd_attention

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _build_attention(p)
    sys.exit(cmd_attention(p.parse_args()))
