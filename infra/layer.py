"""`python -m infra.layer` (`make layer`): builds the layer into layers/build/ for inspection
(jobsched.cdk.layer, which the construct builds it with)."""

from jobsched.cdk.layer import main

if __name__ == "__main__":
    main()
